"""Benchmark: what the divergence guard costs, against an epoch of the MNIST convnet.

Run under ``horovodrun -np 2`` (the guard only runs with several processes)::

    horovodrun -np 2 --gloo .venv/bin/python scripts/bench/bench_guard.py [--checks 50]

Each process builds the Keras MNIST convnet (wrapped optimizer, as a script would),
trains one epoch of MNIST-shaped data at global batch 128 (timed: the epoch span,
the reference), then calls the guard ``--checks`` times in a row with a barrier
before each call, so that the time measured is the guard's own (a float64 sum per
trainable variable, one allgather, the comparison) and not one process waiting for
the other. The guard runs after the first step of each ``fit`` and at each epoch end:
its cost per epoch is about one check. Rank 0 prints the median check time and its
share of the epoch. Target (issue 9): under 0.5% of an epoch.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tensorflow as tf
from _bench_mnist import build_model, mnist_like

import det_sdk as det


class EpochSpan(tf.keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.begin = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.span = time.perf_counter() - self.begin


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checks", type=int, default=50)
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--runs-dir", default=str(Path(tempfile.gettempdir()) / "det-bench-guard"),
                        help="a directory every process sees (removed at the end)")
    args = parser.parse_args()
    # one runs directory that every process sees
    context = det.keras.init(runs_dir=args.runs_dir, seed=1, checkpoint_period=False)
    dist = context.distributed
    data = mnist_like(args.samples, 512)
    x, y = context.wrap_data(data["x"], data["y"])
    model = build_model()
    model.compile(optimizer=context.wrap_optimizer(tf.keras.optimizers.SGD(0.01)),
                  loss="categorical_crossentropy", metrics=["accuracy"])
    span = EpochSpan()
    context.fit(model, x=x, y=y, batch_size=dist.shard_batch_size(128), epochs=1,
                validation_data=(data["x_val"], data["y_val"]), verbose=0,
                callbacks=[span])
    loop = context._loop
    times = []
    for _ in range(args.checks):
        dist.barrier()
        t0 = time.perf_counter()
        loop.check_in_sync(model, "benchmark")
        times.append(time.perf_counter() - t0)
    spans = dist.allgather(span.span)
    if dist.is_chief:
        check = statistics.median(times)
        epoch = statistics.median(spans)
        share = check / epoch
        print(f"{dist.size} processes, {len(model.trainable_weights)} trainable variables, "
              f"{model.count_params():,} params; epoch span {epoch:.3f}s; guard check median "
              f"{check * 1e3:.2f} ms (min {min(times) * 1e3:.2f}, max "
              f"{max(times) * 1e3:.2f}) over {len(times)}")
        print(f"guard per epoch / epoch: {100 * share:.3f}% (target < 0.5%) "
              f"{'OK' if share < 0.005 else 'MISSED'}")
    dist.barrier()
    context.close()
    if dist.is_chief:
        shutil.rmtree(args.runs_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
