"""Benchmark: what the streamed ``context.predict(..., output=DIR)``'s progress costs, and
how much work a killed run's resume does again.

In the streamed predict the progress *is* the parts: each global batch's part file and its
sidecar are written to temporary names and renamed (a killed process loses none), and
every ``PartStore.DURABLE_SECONDS`` (10 s) the writer thread flushes the output's
filesystem (one ``syncfs``): the progress checkpoint that survives a machine's crash.
About once a second the chief reports its rows to the master. Two claims, each measured
in one run:

* **Cost (<= 1 %).** The same Keras MLP predicts the same ``--rows`` rows in batches of
  ``--batch-size`` into a fresh directory, in one process, alternately (DO, OD, ...) for
  ``--reps`` pairs after one warm-up of each:

  - D (default): the streamed predict with progress flushed every ``--interval`` seconds
    (default 2 s: five times as often as the shipped 10 s, so that the short runs have
    flushes in them; a stricter measure) and reports every 1 s;
  - O (progress off): the same call with the interval infinite and no reports. Both
    flush once at the end, before the final manifest (the output must be on disk).

  Reported: D's throughput / O's per pair, the median with a 95 % bootstrap interval of
  the median. Goal >= ``--min-ratio`` (0.99). The two outputs are compared (equal).

* **Redone work (<= one interval).** A subprocess (the ``--worker`` mode) streams a
  ``keras.utils.Sequence`` whose ``__getitem__`` appends each batch index it is asked for
  to a log (``os.write`` on an ``O_APPEND`` descriptor: on disk before the next batch is
  asked for, whenever the process dies). It is killed (SIGKILL) when a random number of
  batches has been fetched (plus a random 0-0.3 s), then run again into the same
  directory to the end. A batch the killed run fetched and the resumed run fetched again
  is redone work (fetched, and perhaps predicted, twice: an upper bound on the
  predictions made twice). Repeated at ``--kills`` random points, each output compared
  bit for bit with an uninterrupted run's. Reported: the most rows redone, over the rows
  one 10 s progress interval holds at the uninterrupted run's throughput (goal <= 1.0),
  and in batches (what is in flight when a process dies: the batch being predicted, the
  writer's queue of two, the part being written).

Usage::

    .venv/bin/python scripts/bench/bench_predict_progress.py [--reps 7] [--kills 5]
        [--interval 2] [--rows 400000]
        [--skip-cost] [--skip-redone]

Exit status 1 when a goal is missed (or a run fails).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_predict import make_model, median_interval

REPO = Path(__file__).resolve().parents[2]
INTERVAL_S = 10.0  # the progress interval


# --- cost: one process, both sides in it ---------------------------------------------------


def cost(args: argparse.Namespace) -> tuple[float, float, float]:
    import numpy as np

    import det_sdk as det
    from det_sdk.keras import _predict
    from det_sdk.predictions import PartStore
    from det_sdk.predictions import files as predictions  # the directory store's flush

    tmp = Path(tempfile.mkdtemp(prefix="bench-progress-"))
    durable = PartStore.DURABLE_SECONDS
    try:
        context = det.keras.init(runs_dir=tmp / "runs")
        model = make_model(args.features, args.width, args.outputs)
        x = np.random.default_rng(0).normal(size=(args.rows, args.features)).astype("float32")
        reference: list = []

        synced = [0.0, 0]  # seconds the writer spent flushing (D), and how many flushes
        real_syncfs = predictions._syncfs

        def timed_syncfs(path: Path) -> None:
            start = time.perf_counter()
            real_syncfs(path)
            synced[0] += time.perf_counter() - start
            synced[1] += 1

        predictions._syncfs = timed_syncfs  # type: ignore[assignment]

        def run(which: str, i: int) -> float:
            out = tmp / f"{which}{i}"
            report = _predict._Progress.REPORT_SECONDS
            synced[0], synced[1] = 0.0, 0
            if which == "O":
                PartStore.DURABLE_SECONDS = float("inf")
                _predict._Progress.REPORT_SECONDS = float("inf")
            else:
                PartStore.DURABLE_SECONDS = args.interval
            try:
                start = time.perf_counter()
                context.predict(model, x, output=out, batch_size=args.batch_size, verbose=0)
                took = time.perf_counter() - start
            finally:
                PartStore.DURABLE_SECONDS = durable
                _predict._Progress.REPORT_SECONDS = report
            if i == 0:
                got = det.load_predictions(out)
                if reference:
                    assert np.array_equal(got, reference[0]), "D and O differ"
                reference.append(got)
            shutil.rmtree(out)
            return took

        run("D", 0), run("O", 0)  # warm-up (tracing); checks D equals O
        ratios = []
        for i in range(1, args.reps + 1):
            order = "DO" if i % 2 else "OD"
            times, flushes = {}, (0.0, 0)
            for w in order:
                times[w] = run(w, i)
                flushes = (synced[0], synced[1]) if w == "D" else flushes
            ratio = times["O"] / times["D"]  # D's throughput / O's
            ratios.append(ratio)
            print(f"pair {i} ({order}): default {times['D']:.3f}s "
                  f"({args.rows / times['D']:,.0f} rows/s) | progress off {times['O']:.3f}s "
                  f"({args.rows / times['O']:,.0f} rows/s) | ratio {ratio:.4f} | D's "
                  f"{flushes[1]} flushes {flushes[0]:.3f}s (writer thread)", flush=True)
        context.close()
        return median_interval(ratios)
    finally:
        PartStore.DURABLE_SECONDS = durable
        shutil.rmtree(tmp, ignore_errors=True)


# --- redone work: a worker process killed and resumed ----------------------------------------


def worker(args: argparse.Namespace) -> None:
    import numpy as np
    import tensorflow as tf

    import det_sdk as det

    log = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    rows, batch = args.worker_rows, args.batch_size
    x = np.random.default_rng(0).normal(size=(rows, args.features)).astype("float32")

    class Logged(tf.keras.utils.Sequence):
        def __len__(self) -> int:
            return -(-rows // batch)

        def __getitem__(self, i: int):
            os.write(log, f"{i}\n".encode())
            return x[i * batch:(i + 1) * batch]

    context = det.keras.init(runs_dir=Path(args.out).parent / "runs")
    model = make_model(args.features, args.width, args.outputs)
    start = time.perf_counter()
    out = context.predict(model, Logged(), output=args.out, batch_size=batch, verbose=0)
    took = time.perf_counter() - start
    Path(args.report).write_text(json.dumps({"rows": out.rows, "seconds": took,
                                             "resumed": out.resumed}))
    context.close()


def _worker_cmd(args: argparse.Namespace, out: Path, log: Path, report: Path) -> list[str]:
    return [sys.executable, __file__, "--worker", "--worker-rows", str(args.kill_rows),
            "--out", str(out), "--log", str(log), "--report", str(report),
            "--batch-size", str(args.kill_batch_size), "--features", str(args.features),
            "--width", str(args.width), "--outputs", str(args.outputs)]


def _fetched(log: Path) -> list[int]:
    try:
        return [int(line) for line in log.read_text().split()]
    except FileNotFoundError:
        return []


def redone(args: argparse.Namespace) -> tuple[float, int, int]:
    import numpy as np

    import det_sdk as det

    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(REPO)}
    rng = random.Random(args.seed)
    batches = -(-args.kill_rows // args.kill_batch_size)
    tmp = Path(tempfile.mkdtemp(prefix="bench-redone-"))
    try:
        ref = tmp / "ref"
        subprocess.run(_worker_cmd(args, ref, tmp / "ref.log", tmp / "ref.json"), env=env,
                       check=True, timeout=900)
        base = json.loads((tmp / "ref.json").read_text())
        expected = det.load_predictions(ref)
        per_interval = base["rows"] / base["seconds"] * INTERVAL_S
        print(f"uninterrupted: {base['rows']:,} rows in {batches} batches, "
              f"{base['seconds']:.1f} s ({base['rows'] / base['seconds']:,.0f} rows/s): "
              f"{per_interval:,.0f} rows in a {INTERVAL_S:.0f} s interval", flush=True)
        worst_rows = worst_batches = 0
        k = tries = 0
        while k < args.kills and tries < 4 * args.kills:
            tries += 1
            out, log1, log2 = tmp / f"k{k}", tmp / f"k{k}-1.log", tmp / f"k{k}-2.log"
            target = rng.randint(2, batches - 3)
            proc = subprocess.Popen(_worker_cmd(args, out, log1, tmp / "k.json"), env=env)
            while len(_fetched(log1)) < target and proc.poll() is None:
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 0.02))
            if proc.poll() is not None:  # it finished first: another point
                print(f"(the run ended before its kill point {target}; another point)")
                shutil.rmtree(out)
                continue
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            first = set(_fetched(log1))
            complete = {int(p.name[5:14]) for p in out.glob("part-*.json")}
            subprocess.run(_worker_cmd(args, out, log2, tmp / "k.json"), env=env, check=True,
                           timeout=900)
            second = set(_fetched(log2))
            # the resumed run predicts every batch without a complete part (it also reads
            # batch 0 for the input's fingerprint, complete or not: not a prediction)
            todo = set(range(batches)) - complete
            assert todo <= second, "a batch without a part was not predicted"
            again = todo & first
            rows_again = sum(min(args.kill_batch_size, args.kill_rows - b * args.kill_batch_size)
                             for b in again)
            same = np.array_equal(det.load_predictions(out), expected)
            assert same, f"kill {k}: the output differs from the uninterrupted run's"
            print(f"kill {k}: SIGKILL after {len(first)} batches fetched ({len(complete)} parts "
                  f"complete); the resumed run predicted {len(todo)}: {len(again)} batches "
                  f"({rows_again:,} rows) again {sorted(again)}; output bit-equal", flush=True)
            worst_rows, worst_batches = max(worst_rows, rows_again), max(worst_batches,
                                                                          len(again))
            shutil.rmtree(out)
            k += 1
        if k < args.kills:
            raise SystemExit(f"only {k} of {args.kills} kills landed before the run's end")
        return worst_rows / per_interval, worst_rows, worst_batches
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7, help="D/O pairs (default 7)")
    ap.add_argument("--rows", type=int, default=400_000, help="rows of the cost runs")
    ap.add_argument("--interval", type=float, default=2.0,
                    help="D's seconds between flushes (default 2; shipped: 10)")
    ap.add_argument("--batch-size", type=int, default=4096)
    ap.add_argument("--features", type=int, default=64)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--outputs", type=int, default=16)
    ap.add_argument("--min-ratio", type=float, default=0.99)
    ap.add_argument("--kills", type=int, default=5, help="random kill points (default 5)")
    ap.add_argument("--kill-rows", type=int, default=100_000)
    ap.add_argument("--kill-batch-size", type=int, default=1024)
    ap.add_argument("--max-redone", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-cost", action="store_true")
    ap.add_argument("--skip-redone", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--worker-rows", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--log", help=argparse.SUPPRESS)
    ap.add_argument("--report", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    print(f"MLP {args.features}-{args.width}-{args.width}-{args.outputs}; "
          f"{os.cpu_count()} cpus")
    ok = True
    if not args.skip_cost:
        print(f"cost: {args.rows:,} rows, batch {args.batch_size}, {args.reps} pairs, "
              f"D flushing every {args.interval} s")
        med, lo, hi = cost(args)
        good = med >= args.min_ratio
        print(f"default / progress-off throughput: median {med:.4f} [{lo:.4f}, {hi:.4f}] "
              f"(target >= {args.min_ratio}) {'OK' if good else 'MISSED'}", flush=True)
        ok &= good
    if not args.skip_redone:
        print(f"redone: {args.kill_rows:,} rows, batch {args.kill_batch_size}, "
              f"{args.kills} kills")
        ratio, rows, batches = redone(args)
        good = ratio <= args.max_redone
        print(f"most redone: {rows:,} rows ({batches} batches) / rows per {INTERVAL_S:.0f} s "
              f"interval: {ratio:.4f} (target <= {args.max_redone}) "
              f"{'OK' if good else 'MISSED'}", flush=True)
        ok &= good
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
