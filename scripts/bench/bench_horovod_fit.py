"""Benchmark: ``context.fit`` on 2 Horovod processes against classic Horovod Keras code.

Alternates, in one run, two ``horovodrun -np 2 --gloo`` launches of
scripts/bench/_bench_hvd_worker.py that train the Keras MNIST convnet (Conv2D(32)-MaxPool-
Conv2D(64)-MaxPool-Flatten-Dropout(0.5)-Dense(10), SGD 0.01) on the same generated
MNIST-shaped float32 data, global batch 128 (64 per process), with validation data:

* A (``det``): ``det_sdk.keras.init(seed=1)`` (a checkpoint at every epoch end, its
  default), ``context.wrap_data``, ``context.wrap_optimizer``, ``context.fit``;
* B (``plain``): the same training hand-written with Horovod's plain TF ops (what a
  correct script must do on Keras 3, where Horovod's Keras wrappers average nothing):
  each rank's contiguous half of the arrays, an optimizer subclass averaging gradients
  in ``apply`` with one grouped allreduce (det_sdk's averaging), ``broadcast_variables``
  before the first step, epoch metrics averaged, ``model.fit`` fed by ``tf.data`` (each rank's
  part shuffled, batched and prefetched: faster than numpy here) with Keras's
  ``BackupAndRestore`` on rank 0 saving model and optimizer at every epoch end (the work
  det_sdk does by default); TensorFlow's thread pools sized ``cores // processes-per-host``
  before the first op, as ``det_sdk``'s init() does;
* C (``--default-threads``, optional): B with TensorFlow's default thread pools.

Each run trains ``--epochs`` + 1 epochs; rank 0 times from the end of the first (warm-up:
tracing, first collectives) to ``on_train_end`` with a callback (the training span; the
wall time of ``fit()`` is not used: it often ends 1-2.5 s after training). Throughput is
timed epochs x training samples / span (also shown: per CPU-second of both ranks in the
span, for information: less sensitive to other work on a shared machine). The order of A
and B flips every pair (AB, BA, ...); the median of the per-pair ratios A/B is the result.

Usage::

    .venv/bin/python scripts/bench/bench_horovod_fit.py [--reps 3] [--epochs 2] [--samples 8192]
        [--val-samples 1024] [--min-ratio 0.99] [--default-threads] [--profile]
        [--quiet-wait 120] [--no-checkpoints] [--feed numpy]

Before each launch the driver waits (up to ``--quiet-wait`` s) until the machine is idle,
so that other work on a shared machine does not start inside one side's timing.

``--profile`` makes the ``det`` worker time every hook of det_sdk's injected callbacks
(per rank, timed epochs only; the profiling itself costs a little).

Exit status 1 when the median samples/s ratio A/B is below ``--min-ratio``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WORKER = HERE / "_bench_hvd_worker.py"
HOROVODRUN = Path(sys.executable).with_name("horovodrun")


def clean_env() -> dict[str, str]:
    from det_sdk.env import outside

    return outside(TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")


def _cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def wait_quiet(max_wait: float, threshold: float = 0.1, window: float = 2.0) -> float:
    """Wait (up to ``max_wait`` s) for a ``window`` in which the machine is < ``threshold`` busy.

    Called between launches, when this benchmark itself runs nothing: other work on a
    shared machine (tests, other benchmarks) would otherwise land in one side's timing.
    Returns the seconds waited; gives up silently after ``max_wait`` (Linux only).
    """
    if max_wait <= 0 or not Path("/proc/stat").exists():
        return 0.0
    start = time.monotonic()
    while True:
        b0, t0 = _cpu_times()
        time.sleep(window)
        b1, t1 = _cpu_times()
        if (b1 - b0) / max(1, t1 - t0) < threshold or time.monotonic() - start > max_wait:
            return time.monotonic() - start - window


def run_worker(mode: str, extra: list[str], processes: int, tmp: Path,
               timeout: float = 600, quiet_wait: float = 0.0) -> dict[str, Any]:
    """Launch the worker (under horovodrun when ``processes`` > 1); rank 0's result JSON.

    ``quiet_wait``: first wait up to this long for the machine to be idle.
    """
    waited = wait_quiet(quiet_wait)
    if waited > 1:
        print(f"  (waited {waited:.0f}s for the machine to be idle before {mode})", flush=True)
    out = tmp / f"{mode}.json"
    out.unlink(missing_ok=True)
    worker = [sys.executable, str(WORKER), mode, "--out", str(out), *extra]
    cmd = ([str(HOROVODRUN), "-np", str(processes), "--gloo", *worker]
           if processes > 1 else worker)
    proc = subprocess.run(cmd, env=clean_env(), cwd=HERE.parents[1], capture_output=True,
                          text=True, timeout=timeout)
    if proc.returncode != 0 or not out.exists():
        sys.stderr.write(proc.stdout[-6000:] + proc.stderr[-6000:])
        raise SystemExit(f"worker {mode} failed (exit {proc.returncode}): {' '.join(cmd)}")
    return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="A/B pairs measured (default 3)")
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs (default 2)")
    parser.add_argument("--samples", type=int, default=8192, help="training samples")
    parser.add_argument("--val-samples", type=int, default=1024, help="validation samples")
    parser.add_argument("--processes", type=int, default=2, help="horovodrun -np (default 2)")
    parser.add_argument("--no-checkpoints", action="store_true",
                        help="both sides without checkpoints")
    parser.add_argument("--feed", choices=("tfdata", "numpy"), default="tfdata",
                        help="B's input pipeline (default tf.data)")
    parser.add_argument("--min-ratio", type=float, default=0.99,
                        help="fail when the median samples/s ratio A/B is below this")
    parser.add_argument("--default-threads", action="store_true",
                        help="also run C: plain Horovod with TensorFlow's default threads")
    parser.add_argument("--profile", action="store_true",
                        help="time det_sdk's callback hooks in the det worker")
    parser.add_argument("--quiet-wait", type=float, default=120,
                        help="before each launch, wait up to this many seconds for the "
                             "machine to be idle (0: don't; default 120)")
    args = parser.parse_args(argv)
    if not HOROVODRUN.exists():
        print(f"no horovodrun next to {sys.executable}", file=sys.stderr)
        return 2

    common = ["--epochs", str(args.epochs), "--samples", str(args.samples),
              "--val-samples", str(args.val_samples),
              *(["--no-checkpoints"] if args.no_checkpoints else [])]
    print(f"horovodrun -np {args.processes} --gloo; {args.samples} training + "
          f"{args.val_samples} validation samples, 1 warm-up + {args.epochs} timed epochs, "
          f"global batch 128; {args.reps} pairs; {os.cpu_count()} cpus; B fed by {args.feed}; "
          + ("no checkpoints" if args.no_checkpoints else "a checkpoint per epoch on both sides"))
    ratios, c_ratios, cpu_ratios = [], [], []
    rates: dict[str, list[float]] = {"A": [], "B": [], "C": []}
    with tempfile.TemporaryDirectory(prefix="bench-hvd-fit-") as tmp_name:
        tmp = Path(tmp_name)
        runs = ["--runs-dir", str(tmp / "runs")]
        launches = {
            "A": ("det", [*common, *runs, *(["--profile"] if args.profile else [])]),
            "B": ("plain", [*common, "--feed", args.feed]),
            "C": ("plain", [*common, "--feed", args.feed, "--default-threads"]),
        }
        for i in range(args.reps):
            order = "AB" if i % 2 == 0 else "BA"
            if args.default_threads:
                order += "C"
            res: dict[str, dict[str, Any]] = {}
            for which in order:
                mode, extra = launches[which]
                res[which] = run_worker(mode, extra, args.processes, tmp,
                                        quiet_wait=args.quiet_wait)
                rates[which].append(res[which]["samples_per_s"])
            a, b = res["A"]["samples_per_s"], res["B"]["samples_per_s"]
            ratios.append(a / b)
            cpu_ratios.append(res["A"]["samples_per_cpu_s"] / res["B"]["samples_per_cpu_s"])
            line = (f"pair {i + 1} ({order[:2]}): A det {a:8.1f} samples/s "
                    f"(span {res['A']['span_s']:.3f}s) | B plain {b:8.1f} samples/s "
                    f"(span {res['B']['span_s']:.3f}s) | ratio A/B {a / b:.4f} "
                    f"(per CPU-second {cpu_ratios[-1]:.4f})")
            if "C" in res:
                c = res["C"]["samples_per_s"]
                c_ratios.append(a / c)
                line += f" | C default threads {c:8.1f} samples/s, A/C {a / c:.4f}"
            print(line, flush=True)
            if args.profile:
                for rank, prof in enumerate(res["A"].get("profile_per_rank", [])):
                    total = sum(v[0] for v in prof.values())
                    top = ", ".join(f"{k} {1e3 * v[0]:.1f}ms/{v[1]}" for k, v in prof.items())
                    print(f"    det hooks rank {rank}: {1e3 * total:.1f} ms in all: {top}")

    median = statistics.median(ratios)
    ok = median >= args.min_ratio
    print(f"\nmedian samples/s: A det {statistics.median(rates['A']):.1f}, "
          f"B plain {statistics.median(rates['B']):.1f}"
          + (f", C plain default threads {statistics.median(rates['C']):.1f}"
             if c_ratios else ""))
    if c_ratios:
        print(f"median ratio A/C (det vs plain with default threads): "
              f"{statistics.median(c_ratios):.4f} (information only)")
    print(f"median samples per CPU-second ratio A/B: {statistics.median(cpu_ratios):.4f} "
          "(information only: CPU time of both ranks in the span)")
    print(f"median samples/s ratio A/B (det/plain): {median:.4f} "
          f"(pairs from {min(ratios):.4f} to {max(ratios):.4f}; "
          f"target >= {args.min_ratio}) {'OK' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
