"""Benchmark: what the profiler (det_sdk.profiler) costs ``context.fit``.

One ``det.keras.init()`` run, one model (the Keras MNIST convnet of bench_fit_overhead,
on generated MNIST-shaped data, batch 128, a checkpoint each epoch as det_sdk's defaults
take them); its fits alternate between the profiler on (a fresh sampler at ``--rate``,
Determined's rate of one sample a second by default, the worst case: det_sdk's default
samples every 10 s; and the per-batch timer in the Keras engine) and off (no sampler,
no timer), in the order ON OFF, OFF ON, ... so that a drift of the machine hits both. A
fit is timed by the wall time of the ``context.fit`` call; the result is the median of
the per-pair ratios ON/OFF. Pairs during which other processes used more than
``--max-foreign`` of the machine's CPU are marked noisy and repeated (up to
``--max-attempts`` pairs); the median is over the clean ones (all, with a warning,
when fewer than 3 are clean).

Usage::

    .venv/bin/python scripts/bench/profiler_cost.py [--reps 5] [--epochs 2]
        [--samples 8192] [--rate enabled|default] [--max-ratio 1.01]

Beside the ratio it prints a bound that this machine's noise does not blur: the
sampler thread's own CPU time (measured around each sample and report) plus the per-batch
timer's calls (timed alone) and the start and stop of the sampler on the training
thread, over the fits' wall time: 1 + (those) / (wall).

Exit status 1 when the median ratio exceeds ``--max-ratio``.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import statistics
import sys
import tempfile
import time
from typing import Any

from _bench_mnist import mnist_like
from bench_fit_overhead import SpanTimer, Timing, compiled_model, now

import det_sdk as det
from det_sdk.profiler import BatchTimer, SystemSampler, start_profiler

# The sampler's own CPU time (its thread's, measured around each sample and report): a
# bound on what it can take from training however noisy the machine's wall times are.
SAMPLER_CPU = [0.0]
# The wall time of starting and stopping the profiler, on the training thread, per fit
START_STOP = [0.0]


def _counted(method: Any) -> Any:
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = time.thread_time()
        try:
            return method(self, *args, **kwargs)
        finally:
            SAMPLER_CPU[0] += time.thread_time() - t0
    return wrapper


SystemSampler.sample = _counted(SystemSampler.sample)  # type: ignore[method-assign]
SystemSampler.flush = _counted(SystemSampler.flush)  # type: ignore[method-assign]


def timer_cost(n: int = 200_000) -> float:
    """Seconds the Keras engine's per-batch timer calls cost a batch (its two calls)."""
    timer = BatchTimer()
    t0 = time.perf_counter()
    for _ in range(n):
        timer.batch_start()
        timer.step_end()
    return (time.perf_counter() - t0) / n


def timed_fit(context: Any, model: Any, data: dict[str, Any], epochs: int,
              profiler_on: bool, rate: str) -> Timing:
    """One ``context.fit`` with the profiler on or off, timed from the call."""
    session = context.core._session  # the benchmark's hand on the seam: no API for it
    timer = SpanTimer()
    t0 = now()
    if profiler_on:
        began = time.perf_counter()
        start_profiler(session, {"enabled": True} if rate == "enabled" else None)
        START_STOP[0] += time.perf_counter() - began
    try:
        context.fit(model, x=data["x"], y=data["y"], validation_data=data["val"],
                    batch_size=128, epochs=epochs, verbose=0, callbacks=[timer])
    finally:
        began = time.perf_counter()
        session.stop_profiler()  # its last sample and report: part of the "on" time
        if profiler_on:
            START_STOP[0] += time.perf_counter() - began
    return timer.result(t0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="ON/OFF pairs (default 5)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--rate", choices=("enabled", "default"), default="enabled",
                        help="the profiler's rate when on: profiling.enabled's (1 s) or "
                             "det_sdk's default (10 s)")
    parser.add_argument("--max-ratio", type=float, default=1.01)
    parser.add_argument("--max-foreign", type=float, default=0.10)
    parser.add_argument("--max-attempts", type=int, default=None)
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args(argv)

    raw = mnist_like(args.samples, 1024, seed=args.seed)
    with tempfile.TemporaryDirectory(prefix="bench-profiler-") as runs_dir:
        context = det.keras.init(runs_dir=runs_dir, seed=args.seed,
                                 config={"profiling": {"enabled": False}})
        x, y = context.wrap_data(raw["x"], raw["y"])
        xv, yv = context.wrap_data(raw["x_val"], raw["y_val"])
        data = {"x": x, "y": y, "val": (xv, yv)}
        model = compiled_model(args.seed)
        print(f"{os.cpu_count()} cpus; {args.samples} samples, {args.epochs} epochs, batch "
              f"128, rate {args.rate}; load average {os.getloadavg()[0]:.2f}", flush=True)
        timed_fit(context, model, data, args.epochs, True, args.rate)  # warm-up (tracing)
        timed_fit(context, model, data, args.epochs, False, args.rate)
        pairs: list[tuple[float, bool]] = []
        off_walls: list[float] = []
        on_fits = [0]
        SAMPLER_CPU[0] = START_STOP[0] = 0.0  # the warm-up's left out
        for i in range(args.max_attempts or 3 * args.reps):
            order = (True, False) if i % 2 == 0 else (False, True)
            got = {on: timed_fit(context, model, data, args.epochs, on, args.rate)
                   for on in order}
            ratio = got[True].wall / got[False].wall
            off_walls.append(got[False].wall)
            on_fits[0] += 1
            clean = max(got[True].foreign, got[False].foreign) <= args.max_foreign
            pairs.append((ratio, clean))
            print(f"pair {i + 1} ({'on,off' if order[0] else 'off,on'}): on "
                  f"{got[True].wall:.3f}s off {got[False].wall:.3f}s ratio {ratio:.4f}"
                  f"{'' if clean else ' (noisy)'}", flush=True)
            if sum(c for _, c in pairs) >= args.reps:
                break
        context.close()
    per_batch = timer_cost()
    batches = on_fits[0] * (-(-args.samples // 128)) * args.epochs
    off = statistics.median(off_walls)
    own = SAMPLER_CPU[0] + START_STOP[0] + batches * per_batch
    bound = 1 + own / (on_fits[0] * off)
    print(f"start+stop {START_STOP[0] / on_fits[0] * 1e3:.1f} ms a fit (training thread); "
          f"sampler CPU {SAMPLER_CPU[0]:.3f}s over {on_fits[0]} fits with it on; timer "
          f"{per_batch * 1e9:.0f} ns a batch x {batches} batches; off fit median "
          f"{off:.3f}s: bound on the ratio {bound:.4f} (the profiler's "
          "own CPU time over the fits' wall time)")
    clean = [r for r, c in pairs if c]
    if len(clean) < 3:
        print(f"warning: {len(clean)} clean pairs of {len(pairs)}: the median is over all",
              file=sys.stderr)
        clean = [r for r, _ in pairs]
    median = statistics.median(clean)
    print(f"profiler on/off, median of {len(clean)} pairs: {median:.4f} "
          f"(goal <= {args.max_ratio})")
    return 0 if median <= args.max_ratio else 1


if __name__ == "__main__":
    sys.exit(main())
