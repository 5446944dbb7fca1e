"""2-process DDP: det_sdk.pytorch's Trainer vs a hand-written torchrun-style DDP loop (issue 25).

Both start 2 workers with torchrun's variables (det_sdk.launch.torch_distributed) on
this machine, same MLP, data, global batch and Adam; each reports the seconds its
batches took (rank 0). Alternating runs; the gate is the median of the pairs' ratios.
Goal: throughput ratio >= 0.99.

    .venv/bin/python scripts/bench/bench_pytorch_ddp.py [--batches 600] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

N, D, H, C, GBS = 8192, 256, 512, 10, 64


def _data() -> Any:
    import torch

    g = torch.Generator().manual_seed(0)
    return torch.utils.data.TensorDataset(torch.randn(N, D, generator=g),
                                          torch.randint(0, C, (N,), generator=g))


def _model() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(D, H), torch.nn.ReLU(), torch.nn.Linear(H, H),
                               torch.nn.ReLU(), torch.nn.Linear(H, C))


def worker_hand(batches: int) -> float:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    size = dist.get_world_size()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // size))
    model = torch.nn.parallel.DistributedDataParallel(_model())
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    ds = _data()
    sampler = torch.utils.data.distributed.DistributedSampler(ds, shuffle=True, seed=0)
    loader = torch.utils.data.DataLoader(ds, batch_size=GBS // size, sampler=sampler)
    done, epoch = 0, 0
    dist.barrier()
    t0 = time.perf_counter()
    while done < batches:
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            float(loss.item())
            done += 1
            if done == batches:
                break
        epoch += 1
    dt = time.perf_counter() - t0
    dist.destroy_process_group()
    return dt


def worker_trainer(batches: int) -> float:
    import torch

    import det_sdk.pytorch as pytorch

    class Timer(pytorch.PyTorchCallback):
        t0 = t1 = 0.0

        def on_training_start(self) -> None:
            self.t0 = time.perf_counter()

        def on_validation_start(self) -> None:
            self.t1 = self.t1 or time.perf_counter()

    class Trial(pytorch.PyTorchTrial):
        def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
            self.context = context
            self.model = context.wrap_model(_model())
            self.opt = context.wrap_optimizer(torch.optim.Adam(self.model.parameters(), 1e-3))
            self.timer = Timer()

        def build_callbacks(self) -> dict:
            return {"t": self.timer}

        def build_training_data_loader(self) -> pytorch.DataLoader:
            return pytorch.DataLoader(_data(), shuffle=True,
                                      batch_size=self.context.get_per_slot_batch_size())

        def build_validation_data_loader(self) -> pytorch.DataLoader:
            return pytorch.DataLoader(torch.utils.data.TensorDataset(
                torch.zeros(2, D), torch.zeros(2).long()), batch_size=1)

        def train_batch(self, batch: tuple, epoch_idx: int, batch_idx: int) -> dict:
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.model(x), y)
            self.context.backward(loss)
            self.context.step_optimizer(self.opt)
            return {"loss": loss}

        def evaluate_batch(self, batch: tuple, batch_idx: int) -> dict:
            x, y = batch
            return {"val_loss": torch.nn.functional.cross_entropy(self.model(x), y)}

    with tempfile.TemporaryDirectory() as runs, pytorch.init(
            hparams={"global_batch_size": GBS}, runs_dir=os.environ.get("BENCH_RUNS", runs),
            seed=0) as ctx:
        trial = Trial(ctx)
        pytorch.Trainer(trial, ctx).fit(max_length=pytorch.Batch(batches))
        return trial.timer.t1 - trial.timer.t0


def _launch(kind: str, batches: int) -> float:
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run(
            [sys.executable, "-m", "det_sdk.launch.torch_distributed", "--nproc-per-node", "2",
             sys.executable, __file__, "--worker", kind, "--batches", str(batches)],
            capture_output=True, text=True, env={**os.environ, "BENCH_RUNS": d}, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batches", type=int, default=600)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--worker", choices=["hand", "trainer"])
    args = p.parse_args()
    if args.worker:
        dt = (worker_hand if args.worker == "hand" else worker_trainer)(args.batches)
        if os.environ.get("RANK") == "0":
            print(dt)
        return
    hs, ts = [], []
    for _ in range(args.repeats):
        hs.append(_launch("hand", args.batches))
        ts.append(_launch("trainer", args.batches))
    h, t = statistics.median(hs), statistics.median(ts)
    pairs = sorted(a / b for a, b in zip(hs, ts))
    print(f"2 processes (gloo, CPU), {args.batches} batches of {GBS}, MLP {D}-{H}-{H}-{C}, Adam")
    print(f"hand-written DDP loop: {h:.3f} s (median of {args.repeats}: {hs})")
    print(f"det_sdk Trainer:       {t:.3f} s ({ts})")
    ratio = statistics.median(pairs)  # each pair ran back to back: the noise they share cancels
    print(f"pairs (hand / Trainer): {', '.join(f'{r:.3f}' for r in pairs)}")
    print(f"throughput ratio Trainer / hand: {ratio:.3f} (goal >= 0.99): "
          f"{'OK' if ratio >= 0.99 else 'BELOW GOAL'}")
    sys.exit(0 if ratio >= 0.99 else 1)


if __name__ == "__main__":
    main()
