"""Benchmark: what a checkpoint costs training inside ``context.fit``, the public API,
against writing the same bytes synchronously (``write`` + ``fsync``), side by side.

The claim (issue 26): training is blocked per checkpoint for at most 0.2 of a raw
write+fsync of the checkpoint's bytes, at 10M, 50M and 200M parameters.

Each round runs, in an alternating order:

* **with checkpoints**: ``det.keras.init(checkpoint_period={"batches": P})`` and one
  ``context.fit`` of a Dense stack of about ``--params`` parameters (Adam, batches of 8
  rows, so a step is cheap next to a save) for ``(C + 2) * P`` batches: checkpoints at
  batches P, 2P, ..., (C+1)P, each written by the background writer while training
  goes on. A callback of the script notes when each batch ends. The first checkpoint
  of a process grows its heap by one copy of the state (the page faults of the step
  that writes new buffers while the snapshot holds the old ones): a one-time cost,
  printed on its own (from the end of batch 1 to the end of batch 2P-1). The
  measured window is from the end of batch 2P-1 (the first write long done) to the
  end of the last batch, so it holds the next C checkpoints whole: the snapshot on
  the training thread, and all the writer takes from training on shared cores while
  the write runs (P batches give it time to finish). The save at the end of ``fit``
  falls after the window: no background writer can hide the last write.
* **without**: the same fit with ``checkpoint_period=False``, the same window.
* **reference**: the checkpoint's ``state.bin`` size, written raw and fsynced.

A round's figure is (window with - window without) / C / reference; the result is the
median of the rounds, with their range and a 95% bootstrap interval of the median.
OK when the interval's top is under ``--goal``, MISSED when its bottom is over it,
INCONCLUSIVE otherwise (exit 0, 1, 2).

Usage::

    .venv/bin/python scripts/bench/bench_fit_checkpoint.py --params 10000000 --reps 7
    .venv/bin/python scripts/bench/bench_fit_checkpoint.py --params 50000000 --reps 5
"""

from __future__ import annotations

import argparse
import math
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import bench_checkpoint as _bench_checkpoint  # scripts/ is on sys.path as the script's folder
import numpy as np
import tensorflow as tf

import det_sdk as det

BATCH = 8


class _BatchEnds(tf.keras.callbacks.Callback):
    """When each training batch ended (the script's own callback, as a user writes one)."""

    def __init__(self) -> None:
        super().__init__()
        self.ends: list[float] = []

    def on_train_batch_end(self, batch: int, logs: object = None) -> None:
        self.ends.append(time.perf_counter())


def _model(params: int, seed: int, context: object) -> tuple[tf.keras.Model, int]:
    model, width = _bench_checkpoint.dense_stack(params, seed)  # the same model as there
    model.compile(optimizer=context.wrap_optimizer(tf.keras.optimizers.Adam(1e-5)),
                  loss="sparse_categorical_crossentropy")
    return model, width


def window(params: int, period: int, checkpoints: int, where: Path,
           with_checkpoints: bool) -> tuple[float, float, int]:
    """(seconds from the end of batch 2P-1 to the end of the last batch, seconds from the
    end of batch 1 to the end of batch 2P-1, state.bin bytes)."""
    ends, size = batch_ends(params, period, checkpoints, where, with_checkpoints)
    first = ends[2 * period - 2]  # the end of batch 2P-1
    return ends[-1] - first, first - ends[0], size


def batch_ends(params: int, period: int, checkpoints: int, where: Path,
               with_checkpoints: bool) -> tuple[list[float], int]:
    """One measured fit: when each of its ``(checkpoints + 2) * period`` batches ended
    (``time.perf_counter()``), and the checkpoints' state.bin bytes."""
    runs = Path(tempfile.mkdtemp(dir=where))
    try:
        context = det.keras.init(
            runs_dir=runs, seed=0,
            checkpoint_period={"batches": period} if with_checkpoints else False)
        model, width = _model(params, 0, context)
        rng = np.random.default_rng(0)
        n = (checkpoints + 2) * period * BATCH
        x = rng.standard_normal((n, width)).astype(np.float32)
        y = rng.integers(0, 10, size=n)
        xv, yv = x[:BATCH], y[:BATCH]
        ends = _BatchEnds()
        context.fit(model, x, y, batch_size=BATCH, epochs=1, validation_data=(xv, yv),
                    callbacks=[ends], verbose=0, shuffle=False)
        size = max((p.stat().st_size for p in runs.rglob("state.bin")), default=0)
        return ends.ends, size
    finally:
        shutil.rmtree(runs, ignore_errors=True)


def raw_write(nbytes: int, where: Path) -> float:
    """Seconds to write and fsync ``nbytes`` (bench_checkpoint.py's reference)."""
    took, path = _bench_checkpoint.raw_write(nbytes, where)
    path.unlink()
    return took


def median_interval(values: list[float], seed: int = 0, rounds: int = 4000
                    ) -> tuple[float, float, float]:
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(values, k=len(values)))
                  for _ in range(rounds))
    return statistics.median(values), meds[int(0.025 * rounds)], meds[int(0.975 * rounds) - 1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", type=int, default=10_000_000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--period", type=int, default=0,
                    help="batches between checkpoints (default: enough for a write)")
    ap.add_argument("--checkpoints", type=int, default=3)
    ap.add_argument("--goal", type=float, default=0.2)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args(argv)
    where = Path(tempfile.mkdtemp(dir=args.dir))
    try:
        # warm-up: tracing, the page cache, and the period: a write must end within it
        base, _, size = window(args.params, 5, 1, where, True)
        step = base / 6  # the ends of batches 9 to 15: six steps, one checkpoint among them
        period = args.period or max(5, math.ceil(2.5 * raw_write(size, where) / step))
        print(f"{args.params / 1e6:.0f}M parameters, state.bin {size / 1e6:.0f} MB; "
              f"step {step * 1e3:.1f} ms, a checkpoint every {period} batches, "
              f"{args.checkpoints} per fit", flush=True)
        ratios, firsts = [], []
        for rep in range(args.reps):
            order = [True, False] if rep % 2 == 0 else [False, True]
            runs = {w: window(args.params, period, args.checkpoints, where, w) for w in order}
            raw = raw_write(size, where)
            blocked = (runs[True][0] - runs[False][0]) / args.checkpoints
            ratios.append(blocked / raw)
            firsts.append((runs[True][1] - runs[False][1]) / raw)
            print(f"round {rep + 1}: blocked {blocked * 1e3:.0f} ms per checkpoint (window "
                  f"{runs[True][0]:.2f} s vs {runs[False][0]:.2f} s), raw write+fsync "
                  f"{raw * 1e3:.0f} ms: {ratios[-1]:.3f}; the first checkpoint "
                  f"{firsts[-1]:.3f}", flush=True)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    print(f"the first checkpoint of a fit (heap growth included): median "
          f"{statistics.median(firsts):.3f} of raw write+fsync (information)")
    med, lo, hi = median_interval(ratios)
    verdict = "OK" if hi <= args.goal else "MISSED" if lo > args.goal else "INCONCLUSIVE"
    print(f"blocked per checkpoint / raw write+fsync through context.fit: median {med:.3f} "
          f"[{lo:.3f}, {hi:.3f}] (rounds {min(ratios):.3f}-{max(ratios):.3f}; goal <= "
          f"{args.goal}) {verdict}")
    return {"OK": 0, "MISSED": 1, "INCONCLUSIVE": 2}[verdict]


if __name__ == "__main__":
    sys.exit(main())
