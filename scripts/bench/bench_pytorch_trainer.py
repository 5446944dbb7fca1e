"""Trainer overhead: det_sdk.pytorch.Trainer vs a hand-written PyTorch loop (issue 25).

Same model (an MLP), same data and batches, same optimizer, one process, no
validation or checkpoint inside the timed span (fit's final ones are excluded by timing
the batches through a callback). Alternating runs, median of each. Goal: ratio <= 1.02.

    .venv/bin/python scripts/bench/bench_pytorch_trainer.py [--batches 400] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

import det_sdk.pytorch as pytorch

N, D, H, C, GBS = 8192, 256, 512, 10, 64


def _data() -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(0)
    return torch.utils.data.TensorDataset(torch.randn(N, D, generator=g),
                                          torch.randint(0, C, (N,), generator=g))


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(D, H), torch.nn.ReLU(), torch.nn.Linear(H, H),
                               torch.nn.ReLU(), torch.nn.Linear(H, C))


def hand_loop(batches: int) -> float:
    ds, model = _data(), _model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(ds, batch_size=GBS, shuffle=True)
    done, t0 = 0, time.perf_counter()
    while done < batches:
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            float(loss.item())  # a loop that logs its loss reads it
            done += 1
            if done == batches:
                break
    return time.perf_counter() - t0


class _Timer(pytorch.PyTorchCallback):
    def __init__(self) -> None:
        self.t0 = self.t1 = 0.0

    def on_training_start(self) -> None:
        self.t0 = time.perf_counter()

    def on_validation_start(self) -> None:
        self.t1 = self.t1 or time.perf_counter()


class _Trial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context
        self.model = context.wrap_model(_model())
        self.opt = context.wrap_optimizer(torch.optim.Adam(self.model.parameters(), lr=1e-3))
        self.timer = _Timer()

    def build_callbacks(self) -> dict:
        return {"timer": self.timer}

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(_data(), batch_size=self.context.get_per_slot_batch_size(),
                                  shuffle=True)

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(torch.utils.data.TensorDataset(torch.zeros(1, D),
                                                                 torch.zeros(1).long()),
                                  batch_size=1)

    def train_batch(self, batch: tuple, epoch_idx: int, batch_idx: int) -> dict:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch: tuple, batch_idx: int) -> dict:
        x, y = batch
        return {"val_loss": torch.nn.functional.cross_entropy(self.model(x), y)}


def trainer(batches: int) -> float:
    with tempfile.TemporaryDirectory() as runs, \
            pytorch.init(hparams={"global_batch_size": GBS}, runs_dir=runs, seed=0) as ctx:
        trial = _Trial(ctx)
        pytorch.Trainer(trial, ctx).fit(max_length=pytorch.Batch(batches))
        return trial.timer.t1 - trial.timer.t0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batches", type=int, default=400)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    hand_loop(50)
    trainer(50)  # warm-up
    hs, ts = [], []
    for _ in range(args.repeats):
        hs.append(hand_loop(args.batches))
        ts.append(trainer(args.batches))
    h, t = statistics.median(hs), statistics.median(ts)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, {args.batches} "
          f"batches of {GBS}, MLP {D}-{H}-{H}-{C}, Adam")
    print(f"hand-written loop: {h:.3f} s (median of {args.repeats})")
    print(f"det_sdk Trainer:   {t:.3f} s")
    print(f"ratio Trainer / hand loop: {t / h:.3f} (goal <= 1.02)")


if __name__ == "__main__":
    main()
