"""Benchmark: training blocked per checkpoint through ``context.fit`` when checkpoints go
to S3, against the same to the local disk, side by side (issue 47: within 1.2x).

Each round runs, in an alternating order, bench_fit_checkpoint.py's measured ``fit``
(a Dense stack of ``--params`` parameters, checkpoints every P batches) three times:
checkpoints to an S3 bucket (SeaweedFS, started here; ``checkpoint_storage: {type:
s3}`` through ``DET_CONFIG``), checkpoints to the run's folder (shared_fs), and no
checkpoints. Two figures per checkpoint, each S3's against the local disk's:

* **Held up** (the goal's figure): how long the training thread stood at a checkpoint,
  the two batches around the save less two of the run's median batches, median over
  every measured checkpoint of every round (the run without checkpoints, measured at
  the same batches, gives the floor). The snapshot, and any wait for an earlier
  checkpoint's write or upload, land here.
* **Slowed**: (window with - window without) / C, the window from the end of batch
  2P-1 to the end of the last, medians of the rounds, with a 95% interval of the median
  difference. It adds the CPU the writer, the upload and the server take from training
  on shared cores; each round prints that CPU per checkpoint beyond the disk's, this
  process's (the upload's SHA-256 and PUTs) and the server's (which, here, shares the
  training's cores; a real bucket's does not). When training keeps every core busy,
  that CPU is taken from it whatever runs the upload.

``--train-threads N`` limits TensorFlow to N threads (intra- and inter-op), as a
training loop that waits on a GPU leaves cores free: the upload can then run beside it.
``--period P`` longer than an upload lets each upload end before the next checkpoint.

    .venv/bin/python scripts/bench/bench_fit_s3.py --params 5000000 --reps 3
    .venv/bin/python scripts/bench/bench_fit_s3.py --params 5000000 --reps 5 \
        --checkpoints 6 --period 100 --train-threads 1
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_fit_checkpoint as fit_bench
from cpu_time import own_cpu, process_cpu

from tests.seaweedfs import ACCESS_KEY, SECRET_KEY, SeaweedFS


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", type=int, default=5_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--period", type=int, default=20)
    ap.add_argument("--checkpoints", type=int, default=3)
    ap.add_argument("--goal", type=float, default=1.2, help="most S3 / local disk (issue 47)")
    ap.add_argument("--train-threads", type=int, default=0,
                    help="TensorFlow's intra- and inter-op threads (0: TensorFlow's default)")
    args = ap.parse_args()
    if args.train_threads:
        import tensorflow as tf  # before any op: the thread pools are made once

        tf.config.threading.set_intra_op_parallelism_threads(args.train_threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.train_threads)
    with tempfile.TemporaryDirectory(prefix="bench-fit-s3-") as tmp, \
            SeaweedFS(Path(tmp) / "s3") as s3:
        s3.create_bucket("bench")
        config = Path(tmp) / "s3.yaml"
        config.write_text(yaml.safe_dump({"checkpoint_storage": {
            "type": "s3", "bucket": "bench", "endpoint_url": s3.endpoint_url,
            "access_key": ACCESS_KEY, "secret_key": SECRET_KEY}}))
        where = Path(tmp) / "runs"
        where.mkdir()

        cpu: dict[str, tuple[float, float]] = {}  # kind: (this process's, the server's)
        stalls: dict[str, list[float]] = {"s3": [], "local": [], "none": []}

        def window(kind: str) -> float:
            if kind == "s3":
                os.environ["DET_CONFIG"] = str(config)
            else:
                os.environ.pop("DET_CONFIG", None)
            before = (own_cpu(), process_cpu(s3.proc.pid))
            ends, _ = fit_bench.batch_ends(args.params, args.period, args.checkpoints, where,
                                           kind != "none")
            cpu[kind] = (own_cpu() - before[0], process_cpu(s3.proc.pid) - before[1])
            stalls[kind].extend(checkpoint_stalls(ends, args.period, args.checkpoints))
            return ends[-1] - ends[2 * args.period - 2]  # from the end of batch 2P-1

        window("local")  # warm-up: tracing, the page cache
        window("s3")
        blocked: dict[str, list[float]] = {"s3": [], "local": []}
        kinds = ["s3", "local", "none"]
        for rep in range(args.reps):
            order = kinds[rep % 3:] + kinds[:rep % 3]
            w = {k: window(k) for k in order}
            for kind in blocked:
                blocked[kind].append((w[kind] - w["none"]) / args.checkpoints)
            # whole runs (fit's final wait included): C checkpoints and the run's first
            client = (cpu["s3"][0] - cpu["local"][0]) / (args.checkpoints + 2)
            server = (cpu["s3"][1] - cpu["local"][1]) / (args.checkpoints + 2)
            print(f"round {rep + 1}: blocked per checkpoint S3 {blocked['s3'][-1] * 1e3:.0f} ms, "
                  f"local disk {blocked['local'][-1] * 1e3:.0f} ms (windows {w['s3']:.2f} / "
                  f"{w['local']:.2f} / {w['none']:.2f} s); CPU per checkpoint beyond the "
                  f"disk's: this process {client * 1e3:.0f} ms, the server {server * 1e3:.0f} ms",
                  flush=True)
    # ratios of medians: a round's own ratio explodes when its disk figure is near zero,
    # which the windows' noise makes common
    stall = {k: statistics.median(v) * 1e3 for k, v in stalls.items()}
    ratio = stall["s3"] / stall["local"] if stall["local"] > 0 else float("inf")
    met = ratio <= args.goal
    s3_ms, local_ms = (statistics.median(blocked[k]) * 1e3 for k in ("s3", "local"))
    mid, low, high = fit_bench.median_interval(
        [a - b for a, b in zip(blocked["s3"], blocked["local"], strict=True)])
    print(f"slowed per checkpoint (windows, medians of {args.reps} rounds): S3 {s3_ms:.0f} ms, "
          f"local disk {local_ms:.0f} ms; S3 - disk {mid * 1e3:.0f} ms [{low * 1e3:.0f}, "
          f"{high * 1e3:.0f}] (95% interval of the median)")
    print(f"held up at a checkpoint (median of {len(stalls['s3'])}): S3 {stall['s3']:.0f} ms, "
          f"local disk {stall['local']:.0f} ms, no checkpoint {stall['none']:.0f} ms (the "
          f"floor); S3 / disk {ratio:.2f}: {'OK' if met else 'MISSED'} (goal <= {args.goal})")
    return 0 if met else 1


def checkpoint_stalls(ends: list[float], period: int, checkpoints: int) -> list[float]:
    """How long training stood at each measured checkpoint (batches 2P ... (C+1)P): the
    two batches around the save (it runs in a batch's end, before or after the script's
    callback notes it), less two median batches of the run. What stays with the
    checkpoint (the snapshot; a wait for the previous write); not the CPU the writer
    and the upload take from later batches, which the windows count."""
    steps = [b - a for a, b in itertools.pairwise(ends)]
    typical = statistics.median(steps)
    return [ends[k * period] - ends[k * period - 2] - 2 * typical
            for k in range(2, checkpoints + 2)]


if __name__ == "__main__":
    sys.exit(main())
