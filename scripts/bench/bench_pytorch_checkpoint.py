"""Benchmark: training time blocked by a det_sdk.pytorch checkpoint, against writing the
same state synchronously (``torch.save`` + ``fsync``), side by side in one run.

The claim (issue 25): for a ~50M-parameter model with Adam (about 600 MB of state), the
Trainer's checkpoint blocks training for at most 0.2 of what a synchronous save costs.

Each round trains a real ``det_sdk.pytorch.Trainer`` on a stack of ``Linear`` layers
(``--params`` parameters, Adam, a few rows of data, so a batch is cheap next to a save)
for ``2 * --period`` batches with ``checkpoint_period=Batch(--period)``; the time inside
``Trainer._checkpoint`` (on the training thread: the RNG gather, the state dict, the
clone) is what training is blocked; the previous write is let finish first, untimed (a
checkpoint period shorter than a write makes training wait for the disk, whatever the
design). The background
write (``torch.save``, sha256, metadata) runs while training goes on. Then, in the same
round, the reference: ``torch.save`` of the same state into the same directory, and
``fsync``. The median ratio over ``--reps`` rounds is compared with ``--goal``.

Usage::

    .venv/bin/python scripts/bench/bench_pytorch_checkpoint.py               # 50M, 5 rounds
    .venv/bin/python scripts/bench/bench_pytorch_checkpoint.py --params 10000000
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

import det_sdk.pytorch as pytorch

WIDTH = 2048  # features per Linear layer: 4.2M parameters each


class LinearStack(pytorch.PyTorchTrial):
    """``layers`` Linear layers of ``width`` features, Adam, ``rows`` rows of random data
    (the benchmarks of det_sdk.pytorch's checkpoints train it)."""

    def __init__(self, context: pytorch.PyTorchTrialContext, layers: int, width: int = WIDTH,
                 rows: int = 8) -> None:
        self.context = context
        torch.manual_seed(0)
        self.model = context.wrap_model(torch.nn.Sequential(
            *[torch.nn.Linear(width, width) for _ in range(layers)]))
        self.opt = context.wrap_optimizer(torch.optim.Adam(self.model.parameters(), lr=1e-4))
        self.data = torch.utils.data.TensorDataset(torch.randn(rows, width),
                                                   torch.randn(rows, width))

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(self.data, batch_size=self.context.get_per_slot_batch_size())

    def build_validation_data_loader(self) -> None:
        return None

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}


def one_round(tmp: Path, layers: int, period: int) -> tuple[list[float], float, int]:
    """(seconds blocked at each checkpoint, seconds of a synchronous save, state bytes)."""
    runs = tmp / "runs"
    blocked: list[float] = []
    with pytorch.init(hparams={"global_batch_size": 4}, runs_dir=runs, seed=1) as ctx:
        trial = LinearStack(ctx, layers)
        trainer = pytorch.Trainer(trial, ctx)
        checkpoint = trainer._checkpoint

        def timed(epoch: int, metrics: Any) -> None:
            # the previous write finishes first, untimed: the claim is what one checkpoint
            # costs training when checkpoints are further apart than a write takes (with
            # them closer, training waits for the disk whatever the design)
            trainer.writer.wait()
            t0 = time.perf_counter()
            checkpoint(epoch, metrics)
            blocked.append(time.perf_counter() - t0)

        trainer._checkpoint = timed  # type: ignore[method-assign]
        trainer.fit(max_length=pytorch.Batch(2 * period),
                    checkpoint_period=pytorch.Batch(period))
        state = trainer.state_dict()
        nbytes = sum(t.numel() * t.element_size() for group in (
            state["models_state_dict"], state["optimizers_state_dict"])
            for t in _tensors(group))
        target = tmp / "reference.pth"
        t0 = time.perf_counter()
        with open(target, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        reference = time.perf_counter() - t0
        target.unlink()
    shutil.rmtree(runs, ignore_errors=True)  # the disk holds one round's checkpoints
    return blocked, reference, nbytes


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _tensors(v)]
    return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=int, default=50_000_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--period", type=int, default=6,
                        help="batches between checkpoints (default 6)")
    parser.add_argument("--goal", type=float, default=0.2)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args(argv)
    layers = max(1, round(args.params / (WIDTH * WIDTH + WIDTH)))
    with tempfile.TemporaryDirectory(prefix="bench-pt-ckpt-", dir=args.dir) as tmp_dir:
        tmp = Path(tmp_dir)
        one_round(tmp, layers, 2)  # warm-up: allocation, first files
        ratios = []
        for r in range(args.reps):
            blocked, reference, nbytes = one_round(tmp, layers, args.period)
            per_ckpt = statistics.median(blocked)
            ratios.append(per_ckpt / reference)
            each = ", ".join(f"{1e3 * b:.0f}" for b in blocked)
            print(f"round {r + 1}: {nbytes / 1e6:.0f} MB of model + Adam state; blocked "
                  f"{1e3 * per_ckpt:.0f} ms per checkpoint ({each}), synchronous save "
                  f"{1e3 * reference:.0f} ms: {ratios[-1]:.3f}", flush=True)
    median = statistics.median(ratios)
    ok = median <= args.goal
    print(f"{layers * (WIDTH * WIDTH + WIDTH) / 1e6:.1f}M parameters: blocked / synchronous "
          f"save, median {median:.3f} (rounds {min(ratios):.3f}-{max(ratios):.3f}; goal <= "
          f"{args.goal}) {'OK' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
