"""Benchmark: ``context.predict`` sharded over 2 Horovod processes vs ``model.predict`` in one.

The same Keras MNIST convnet (fixed initial weights from ``--seed``; untrained: the weights
do not change the cost) predicts the same ``--rows`` generated MNIST-shaped float32 rows:

* D (``predict-det``, ``horovodrun -np 2 --gloo``): ``det_sdk.keras.init()``, then
  ``context.predict(model, context.wrap_data(x))``: each process predicts its half and
  ``context.distributed.gather_arrays`` (Horovod allgather) puts the rows back in order on
  every process. The worker also runs the same pieces timed apart: the local
  ``model.predict`` of its shard, then the gather (which includes waiting for the slower
  rank), and once more the gather alone after a barrier (the transfer only).
* S (``predict-single``, plain ``python``): ``model.predict(x)`` in one process with
  TensorFlow's default threads.

Each process predicts once to warm up (tracing, first collectives), then ``--repeats``
timed predictions; a process reports its median. D and S alternate (SD, DS, ...) for
``--reps`` pairs. Reported: the speed-up (S time / D time) per pair and its median, and the
gather's share of the 2-process predict time. On rank 0 the worker asserts that D's
predictions equal S's (``allclose``, atol 1e-5).

Usage::

    .venv/bin/python scripts/bench/bench_horovod_predict.py [--reps 3] [--rows 20000]
        [--repeats 3] [--batch-size N] [--quiet-wait 120]

Gates, each printed with its measured figure: every 2-process run's predictions were
compared with one process's and differ by at most ``--atol`` (default 1e-5), and the
gather's median share (transfer alone) is at most ``--max-gather-share`` (default 2%).
The speed-up is information: on 2 cores two processes cannot beat one. Exit status 1
when a gate is missed (or a run fails).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_horovod_fit import HOROVODRUN, run_worker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="S/D pairs (default 3)")
    parser.add_argument("--rows", type=int, default=20000, help="rows to predict")
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed predictions per process (default 3)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="predict batch size (default: Keras's, 32)")
    parser.add_argument("--processes", type=int, default=2, help="horovodrun -np (default 2)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--atol", type=float, default=1e-5,
                        help="largest |difference| from one process's predictions allowed")
    parser.add_argument("--max-gather-share", type=float, default=0.02,
                        help="largest median share of the gather (transfer alone) allowed")
    parser.add_argument("--quiet-wait", type=float, default=120,
                        help="before each launch, wait up to this many seconds for the "
                             "machine to be idle (0: don't; default 120)")
    args = parser.parse_args(argv)
    if not HOROVODRUN.exists():
        print(f"no horovodrun next to {sys.executable}", file=sys.stderr)
        return 2

    common = ["--rows", str(args.rows), "--repeats", str(args.repeats), "--seed", str(args.seed),
              *(["--batch-size", str(args.batch_size)] if args.batch_size else [])]
    print(f"{args.rows} rows, batch {args.batch_size or 32}; horovodrun -np {args.processes} "
          f"--gloo vs 1 process; {args.repeats} timed predicts per process, {args.reps} pairs; "
          f"{os.cpu_count()} cpus")
    speedups, shares, pure_shares, diffs = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="bench-hvd-predict-") as tmp_name:
        tmp = Path(tmp_name)
        reference = tmp / "single.npy"
        for i in range(args.reps):
            order = "SD" if i % 2 == 0 else "DS"  # S first in pair 1: D compares with it
            res = {}
            for which in order:
                if which == "S":
                    res["S"] = run_worker("predict-single", [*common, "--save", str(reference)],
                                          1, tmp, quiet_wait=args.quiet_wait)
                else:
                    res["D"] = run_worker(
                        "predict-det",
                        [*common, "--runs-dir", str(tmp / "runs"), "--reference", str(reference)],
                        args.processes, tmp, quiet_wait=args.quiet_wait)
            s, d = res["S"], res["D"]
            speedups.append(s["predict_s"] / d["predict_s"])
            shares.append(d["gather_share"])
            pure_shares.append(d["gather_after_barrier_share"])
            # absent when the worker had no reference to compare with: counted as a miss
            diffs.append(d.get("max_abs_diff_vs_single", float("inf")))
            print(f"pair {i + 1} ({order}): 1 process {s['predict_s']:.3f}s | "
                  f"{args.processes} processes {d['predict_s']:.3f}s "
                  f"(local predict {d['local_predict_s']:.3f}s, per rank "
                  f"{d['local_predict_per_rank_s']}; gather {1e3 * d['gather_s']:.1f}ms, "
                  f"after a barrier {1e3 * d['gather_after_barrier_s']:.1f}ms) | "
                  f"speed-up {s['predict_s'] / d['predict_s']:.3f} | gather share "
                  f"{100 * d['gather_share']:.2f}% | max |diff| vs 1 process "
                  f"{d['max_abs_diff_vs_single']:.2e}", flush=True)

    print(f"\nmedian speed-up (1-process time / {args.processes}-process time): "
          f"{statistics.median(speedups):.3f}")
    print(f"median gather share of the {args.processes}-process predict: "
          f"{100 * statistics.median(shares):.2f}% (incl. waiting for the slower rank), "
          f"{100 * statistics.median(pure_shares):.2f}% (transfer alone, after a barrier)")
    worst = max(diffs)
    same = worst <= args.atol
    print(f"largest |difference| from one process's predictions over {len(diffs)} runs: "
          f"{worst:.2e} (target <= {args.atol}) {'OK' if same else 'MISSED'}")
    share = statistics.median(pure_shares)
    cheap = share <= args.max_gather_share
    print(f"median gather share (transfer alone): {100 * share:.2f}% (target <= "
          f"{100 * args.max_gather_share:.0f}%) {'OK' if cheap else 'MISSED'}")
    return 0 if same and cheap else 1


if __name__ == "__main__":
    sys.exit(main())
