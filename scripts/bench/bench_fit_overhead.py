"""Benchmark: ``context.fit`` against a plain ``model.fit`` of the same model and data.

Two copies of the Keras MNIST convnet (Conv2D(32)-MaxPool-Conv2D(64)-MaxPool-Flatten-
Dropout(0.5)-Dense(10), SGD) train on the same generated MNIST-shaped float32 data,
with the same epochs, batch size 128, validation data and ``verbose=0``:

* A: ``context.fit(model_a, x=..., y=..., validation_data=...)`` on data passed
  through ``context.wrap_data``, with ``det_sdk.keras.init()``'s defaults: a checkpoint
  at every epoch end (and the final one), metrics and TensorBoard records;
* B: ``model_b.fit(...)`` on the plain arrays.

The claim is "what ``context.fit`` costs over ``model.fit``", so a fit is timed by the
wall time of the call: for A that covers det_sdk's set-up, all its hooks (also those
that run after a user's callbacks, and the closing ones) and its final checkpoint. The
training span (first ``on_train_begin`` to last ``on_train_end`` of a timing callback,
which misses part of det_sdk's work) is shown for information. On TF 2.15 ``fit()``
often returned 1-2.5 s after training ended (tf.data threads winding down; rarer on
TF 2.21): that noise hits A and B alike, so many pairs and their median are needed.
Both are warmed up once (tracing), then A and B alternate (AB, BA, ...) and the median
of the per-pair ratios A/B is the result.

Usage::

    .venv/bin/python scripts/bench/bench_fit_overhead.py [--reps 5] [--epochs 2] [--samples 8192]
        [--max-ratio 1.02] [--max-foreign 0.1] [--max-attempts 15] [--profile]

Other processes on the machine distort single pairs badly (a 2-core machine shared with
another benchmark doubles a span). So each span also measures how much CPU the *rest* of
the machine used meanwhile (``/proc/stat`` busy time, steal included, minus this
process's own CPU time), as a share of all cores. A pair in which either fit saw more
than ``--max-foreign`` (default 10%) is marked ``noisy`` and repeated, up to
``--max-attempts`` pairs in all; the median is taken over the clean pairs (over all
pairs, with a warning, when fewer than ``--reps`` clean ones could be had). With fewer
than 3 clean pairs the result is INCONCLUSIVE (exit status 2), never OK. The CPU time of
this process during each fit is reported as a third ratio, for information.

``--profile`` also times every hook of det_sdk's injected callbacks (summed over the
measured A runs) to show what the overhead is made of.

Exit status 1 when the median wall ratio exceeds ``--max-ratio``, 2 when inconclusive.
"""

from __future__ import annotations

import argparse
import contextlib
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import tensorflow as tf
from _bench_hooks import HookProfile
from _bench_mnist import build_model, mnist_like

import det_sdk as det


def compiled_model(seed: int) -> tf.keras.Model:
    """The Keras MNIST convnet, compiled with SGD."""
    tf.keras.utils.set_random_seed(seed)
    model = build_model()
    model.compile(
        loss="categorical_crossentropy",
        optimizer=tf.keras.optimizers.SGD(0.01),
        metrics=["accuracy"],
    )
    return model


def machine_busy_seconds() -> float:
    """CPU seconds all processes of the machine have used since boot (Linux; else 0).

    From the first line of ``/proc/stat``: user, nice, system, irq, softirq and steal
    (time the hypervisor gave our virtual cores to someone else).
    """
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


class SpanTimer(tf.keras.callbacks.Callback):
    """First ``on_train_begin`` to last ``on_train_end`` of the fits it is passed to."""

    def __init__(self) -> None:
        super().__init__()
        self._supports_tf_logs = True  # never makes Keras convert logs for it
        self.begin: float | None = None
        self.end: float | None = None
        self.cpu_begin = self.cpu_end = 0.0
        self.busy_begin = self.busy_end = 0.0

    def on_train_begin(self, logs: Any = None) -> None:
        if self.begin is None:
            self.begin = time.perf_counter()
            self.cpu_begin = time.process_time()
            self.busy_begin = machine_busy_seconds()

    def on_train_end(self, logs: Any = None) -> None:
        self.end = time.perf_counter()
        self.cpu_end = time.process_time()
        self.busy_end = machine_busy_seconds()

    def result(self, called: tuple[float, float, float]) -> Timing:
        """The timing of a fit called at ``called`` (perf_counter, process CPU, machine
        busy seconds) that just returned."""
        returned = time.perf_counter()
        cpu_after, busy_after = time.process_time(), machine_busy_seconds()
        assert self.begin is not None and self.end is not None, "fit never trained"
        t0, cpu0, busy0 = called
        wall, cpu = returned - t0, cpu_after - cpu0
        others = max(0.0, busy_after - busy0 - cpu)
        return Timing(span=self.end - self.begin, wall=wall, before=self.begin - t0,
                      after=returned - self.end, cpu=cpu,
                      foreign=others / (wall * (os.cpu_count() or 1)))


def now() -> tuple[float, float, float]:
    return time.perf_counter(), time.process_time(), machine_busy_seconds()


@dataclass
class Timing:
    """One fit: training span, wall time of the call, and the time outside the span."""

    span: float
    wall: float
    before: float  # fit() called -> first on_train_begin (data set-up)
    after: float  # last on_train_end -> fit() returned
    cpu: float  # CPU time of this process (all threads) during the call
    foreign: float  # share of the machine's CPU other processes used during the call


def run_a(context: Any, model: tf.keras.Model, data: dict[str, Any], epochs: int
          ) -> Timing:
    timer = SpanTimer()
    t0 = now()
    context.fit(model, x=data["x"], y=data["y"], validation_data=data["val"],
                batch_size=128, epochs=epochs, verbose=0, callbacks=[timer])
    return timer.result(t0)


def run_b(model: tf.keras.Model, data: dict[str, Any], epochs: int) -> Timing:
    timer = SpanTimer()
    t0 = now()
    model.fit(data["x"], data["y"], validation_data=data["val"], batch_size=128,
              epochs=epochs, verbose=0, callbacks=[timer])
    return timer.result(t0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="A/B pairs measured (default 5)")
    parser.add_argument("--epochs", type=int, default=2, help="epochs per fit (default 2)")
    parser.add_argument("--samples", type=int, default=8192, help="training samples")
    parser.add_argument("--val-samples", type=int, default=1024, help="validation samples")
    parser.add_argument("--max-ratio", type=float, default=1.02,
                        help="fail when the median wall ratio A/B exceeds this (default 1.02)")
    parser.add_argument("--max-foreign", type=float, default=0.10,
                        help="a pair is noisy when other processes used more than this "
                             "share of the machine's CPU during either fit (default 0.10)")
    parser.add_argument("--max-attempts", type=int, default=None,
                        help="pairs run at most, noisy ones included (default 3 x reps)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--profile", action="store_true",
                        help="time each hook of det_sdk's injected callbacks")
    args = parser.parse_args(argv)

    data = mnist_like(args.samples, args.val_samples, seed=args.seed)
    x_tr, y_tr, x_va, y_va = data["x"], data["y"], data["x_val"], data["y_val"]

    with tempfile.TemporaryDirectory(prefix="bench-fit-") as runs_dir:
        # det_sdk's defaults: a checkpoint every epoch (and at the end)
        context = det.keras.init(runs_dir=runs_dir, seed=args.seed)
        xa, ya = context.wrap_data(x_tr, y_tr)
        xva, yva = context.wrap_data(x_va, y_va)
        data_a = {"x": xa, "y": ya, "val": (xva, yva)}
        data_b = {"x": x_tr, "y": y_tr, "val": (x_va, y_va)}
        model_a, model_b = compiled_model(args.seed), compiled_model(args.seed)

        print(f"tf {tf.__version__}, {os.cpu_count()} cpus; {args.samples} samples, "
              f"{args.epochs} epochs, batch 128, {args.reps} pairs; "
              f"load average {os.getloadavg()[0]:.2f}")
        wa, wb = run_a(context, model_a, data_a, args.epochs), run_b(model_b, data_b, args.epochs)
        print(f"warm-up: A span {wa.span:.3f}s wall {wa.wall:.3f}s | "
              f"B span {wb.span:.3f}s wall {wb.wall:.3f}s")

        profile = HookProfile()
        pairs: list[tuple[Timing, Timing, bool]] = []  # (A, B, clean)
        max_attempts = args.max_attempts or 3 * args.reps
        with profile.installed() if args.profile else contextlib.nullcontext():
            while (sum(clean for *_, clean in pairs) < args.reps
                   and len(pairs) < max_attempts):
                i = len(pairs)
                order = "AB" if i % 2 == 0 else "BA"
                result: dict[str, Timing] = {}
                for which in order:
                    if which == "A":
                        profile.active = args.profile
                        result["A"] = run_a(context, model_a, data_a, args.epochs)
                        profile.active = False
                    else:
                        result["B"] = run_b(model_b, data_b, args.epochs)
                a, b = result["A"], result["B"]
                clean = max(a.foreign, b.foreign) <= args.max_foreign
                pairs.append((a, b, clean))
                print(f"pair {i + 1} ({order}): wall A {a.wall:.3f}s B {b.wall:.3f}s "
                      f"ratio {a.wall / b.wall:.4f} | span A {a.span:.3f}s B {b.span:.3f}s "
                      f"ratio {a.span / b.span:.4f} | CPU ratio {a.cpu / b.cpu:.4f} | "
                      f"after span A {a.after:.2f}s B {b.after:.2f}s | others "
                      f"{100 * a.foreign:.0f}%/{100 * b.foreign:.0f}%"
                      f"{'' if clean else ' noisy'}", flush=True)
        context.close()

    used = [(a, b) for a, b, clean in pairs if clean]
    print(f"{len(used)} clean pairs of {len(pairs)} run (other processes used <= "
          f"{100 * args.max_foreign:.0f}% of the machine)")
    if len(used) < 3:
        print("INCONCLUSIVE: fewer than 3 clean pairs; run again on a quieter machine")
        return 2
    if args.profile:
        profile.report(len(pairs))
    for k, name in ((0, "context.fit"), (1, "model.fit")):
        before = statistics.median(p[k].before for p in used)
        afters = [p[k].after for p in used]
        slow = sum(t > 0.5 for t in afters)
        print(f"outside the span, {name}: median {before:.3f}s before training, "
              f"{statistics.median(afters):.3f}s after it; {slow} of {len(used)} fits "
              f"returned > 0.5 s after training ended (max {max(afters):.2f}s)")
    span = statistics.median(a.span / b.span for a, b in used)
    wall = statistics.median(a.wall / b.wall for a, b in used)
    cpu = statistics.median(a.cpu / b.cpu for a, b in used)
    ok = wall <= args.max_ratio
    print(f"\nmedian wall ratio context.fit/model.fit: {wall:.4f} over {len(used)} clean pairs "
          f"(target <= {args.max_ratio}) {'OK' if ok else 'MISSED'}")
    print(f"median span ratio context.fit/model.fit: {span:.4f} (information: misses part "
          "of det_sdk's work)")
    print(f"median CPU-time ratio context.fit/model.fit: {cpu:.4f} (information)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
