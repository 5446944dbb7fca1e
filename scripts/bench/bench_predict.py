"""Benchmark: streamed ``context.predict(..., output=DIR)`` vs ``model.predict`` + ``np.save``.

Two claims, each measured side by side in one run:

* **Throughput, 1 process.** The same Keras MLP (``--features`` inputs, two hidden layers
  of ``--width``, ``--outputs`` outputs; fixed weights) predicts the same ``--rows``
  float32 rows in batches of ``--batch-size``, in one process, alternately (SP, PS, ...)
  for ``--reps`` pairs after one warm-up of each:

  - S (streamed): ``context.predict(model, x, output=DIR, batch_size=B)`` into a fresh
    directory (part files written by a thread, flushed to disk every 10 s and at the end,
    and the manifest);
  - P (plain): ``np.save(path, model.predict(x, batch_size=B))`` (no fsync: what a script
    does; stricter for S).

  Reported: S's throughput / P's per pair, the median with a 95% bootstrap interval of
  the median. Goal >= ``--min-ratio`` (0.95). Both outputs are compared (equal arrays).

* **Memory, 2 processes.** ``horovodrun -np 2 --gloo`` runs the worker mode of this
  script over a ``tf.data`` pipeline that makes its rows from their index
  (``Dataset.range(n).batch(B).map(...)``, wrapped with ``context.wrap_data``: no input
  held in memory), streamed into a directory, for ``--small`` (200,000) and ``--large``
  (2,000,000) rows. The chief reports its peak RSS (``resource.getrusage`` ``ru_maxrss``,
  read in the worker process itself). Goal: large / small <= ``--max-rss-ratio`` (1.5).

Usage::

    .venv/bin/python scripts/bench/bench_predict.py [--reps 5] [--rows 200000]
        [--batch-size 4096] [--small 200000] [--large 2000000] [--skip-rss]

Exit status 1 when a goal is missed (or a run fails).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HOROVODRUN = Path(sys.executable).with_name("horovodrun")


def make_model(features: int, width: int, outputs: int):
    import numpy as np
    import tensorflow as tf

    inp = tf.keras.Input((features,))
    h = tf.keras.layers.Dense(width, activation="relu")(inp)
    h = tf.keras.layers.Dense(width, activation="relu")(h)
    model = tf.keras.Model(inp, tf.keras.layers.Dense(outputs)(h))
    rng = np.random.default_rng(1)
    model.set_weights([(rng.normal(size=v.shape) * 0.1).astype("float32")
                       for v in model.get_weights()])
    return model


def median_interval(values: list[float], seed: int = 0, rounds: int = 4000
                    ) -> tuple[float, float, float]:
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(rounds))
    return statistics.median(values), meds[int(0.025 * rounds)], meds[int(0.975 * rounds) - 1]


# --- throughput: one process, both sides in it ----------------------------------------------


def throughput(args: argparse.Namespace) -> tuple[float, float, float]:
    import numpy as np

    import det_sdk as det

    tmp = Path(tempfile.mkdtemp(prefix="bench-predict-"))
    try:
        context = det.keras.init(runs_dir=tmp / "runs")
        model = make_model(args.features, args.width, args.outputs)
        x = np.random.default_rng(0).normal(size=(args.rows, args.features)).astype("float32")

        def streamed(i: int) -> float:
            out = tmp / f"s{i}"
            start = time.perf_counter()
            context.predict(model, x, output=out, batch_size=args.batch_size, verbose=0)
            took = time.perf_counter() - start
            if i == 0:
                ref = np.load(tmp / "p0.npy")
                assert np.array_equal(det.load_predictions(out), ref), "S and P differ"
            shutil.rmtree(out)
            return took

        def plain(i: int) -> float:
            start = time.perf_counter()
            np.save(tmp / f"p{i}.npy", model.predict(x, batch_size=args.batch_size, verbose=0))
            took = time.perf_counter() - start
            if i != 0:
                (tmp / f"p{i}.npy").unlink()
            return took

        plain(0), streamed(0)  # warm-up (tracing); checks S equals P
        ratios = []
        for i in range(1, args.reps + 1):
            times = {}
            for which in ("SP" if i % 2 else "PS"):
                times[which] = streamed(i) if which == "S" else plain(i)
            ratio = times["P"] / times["S"]  # S's throughput / P's
            ratios.append(ratio)
            print(f"pair {i} ({'SP' if i % 2 else 'PS'}): streamed {times['S']:.3f}s "
                  f"({args.rows / times['S']:,.0f} rows/s) | plain {times['P']:.3f}s "
                  f"({args.rows / times['P']:,.0f} rows/s) | ratio {ratio:.3f}", flush=True)
        context.close()
        return median_interval(ratios)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# --- memory: horovodrun -np 2, the worker mode --------------------------------------------


def worker(args: argparse.Namespace) -> None:
    import tensorflow as tf

    import det_sdk as det

    context = det.keras.init(runs_dir=Path(args.out).parent / "runs")
    model = make_model(args.features, args.width, args.outputs)
    features = args.features

    def rows_of(i):  # the rows of a batch of indices, from the indices alone
        col = tf.cast(i, tf.float32)[:, None] / 1e6
        return tf.sin(col * tf.range(1, features + 1, dtype=tf.float32))

    ds = tf.data.Dataset.range(args.worker_rows).batch(args.batch_size).map(rows_of)
    start = time.perf_counter()
    out = context.predict(model, context.wrap_data(ds), output=args.out,
                          batch_size=args.batch_size, verbose=0)
    took = time.perf_counter() - start
    if context.distributed.is_chief:
        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        Path(args.report).write_text(json.dumps({"rows": out.rows, "seconds": took,
                                                 "peak_rss_mib": peak_kib / 1024}))
    context.close()


def peak_rss(args: argparse.Namespace, rows: int, tmp: Path) -> dict:
    report = tmp / f"rss-{rows}.json"
    cmd = [str(HOROVODRUN), "-np", "2", "--gloo", sys.executable, __file__, "--worker",
           "--worker-rows", str(rows), "--out", str(tmp / f"out-{rows}"), "--report", str(report),
           "--batch-size", str(args.batch_size), "--features", str(args.features),
           "--width", str(args.width), "--outputs", str(args.outputs)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"horovodrun failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    shutil.rmtree(tmp / f"out-{rows}")
    return json.loads(report.read_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5, help="S/P pairs (default 5)")
    ap.add_argument("--rows", type=int, default=200_000, help="rows of the throughput runs")
    ap.add_argument("--batch-size", type=int, default=4096)
    ap.add_argument("--features", type=int, default=64)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--outputs", type=int, default=16)
    ap.add_argument("--min-ratio", type=float, default=0.95)
    ap.add_argument("--small", type=int, default=200_000)
    ap.add_argument("--large", type=int, default=2_000_000)
    ap.add_argument("--max-rss-ratio", type=float, default=1.5)
    ap.add_argument("--skip-rss", action="store_true", help="throughput only")
    ap.add_argument("--skip-throughput", action="store_true", help="memory only")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--worker-rows", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--report", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    print(f"MLP {args.features}-{args.width}-{args.width}-{args.outputs}, batch "
          f"{args.batch_size}; {os.cpu_count()} cpus")
    ok = True
    if not args.skip_throughput:
        print(f"throughput: {args.rows:,} rows, 1 process, {args.reps} pairs")
        med, lo, hi = throughput(args)
        good = med >= args.min_ratio  # the median; the interval says how sure
        print(f"streamed / plain throughput: median {med:.3f} [{lo:.3f}, {hi:.3f}] (target >= "
              f"{args.min_ratio}) {'OK' if good else 'MISSED'}", flush=True)
        ok &= good
    if not args.skip_rss:
        if not HOROVODRUN.exists():
            print(f"no horovodrun next to {sys.executable}", file=sys.stderr)
            return 2
        with tempfile.TemporaryDirectory(prefix="bench-predict-rss-") as tmp_name:
            small = peak_rss(args, args.small, Path(tmp_name))
            large = peak_rss(args, args.large, Path(tmp_name))
        ratio = large["peak_rss_mib"] / small["peak_rss_mib"]
        good = ratio <= args.max_rss_ratio
        for r in (small, large):
            print(f"2 processes, {r['rows']:,} rows streamed in {r['seconds']:.1f}s "
                  f"({r['rows'] / r['seconds']:,.0f} rows/s): chief's peak RSS "
                  f"{r['peak_rss_mib']:.0f} MiB")
        print(f"peak RSS {args.large:,} / {args.small:,} rows: {ratio:.3f} (target <= "
              f"{args.max_rss_ratio}) {'OK' if good else 'MISSED'}")
        ok &= good
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
