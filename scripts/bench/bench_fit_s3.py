"""Benchmark: training blocked per checkpoint through ``context.fit`` when checkpoints go
to S3, against the same to the local disk, side by side (issue 47: within 1.2x).

Each round runs, in an alternating order, bench_fit_checkpoint.py's measured ``fit``
(a Dense stack of ``--params`` parameters, checkpoints every P batches, the window
after the first checkpoint) three times: checkpoints to an S3 bucket (SeaweedFS,
started here; ``checkpoint_storage: {type: s3}`` through ``DET_CONFIG``), checkpoints
to the run's folder (shared_fs), and no checkpoints. Blocked per checkpoint is (window
with - window without) / C; the figure is S3's over the local disk's, median of the
rounds. Note that S3 costs the training process an upload after the disk write
(staging folder, SHA-256, PUTs) and that the server shares this machine's cores.

    .venv/bin/python scripts/bench/bench_fit_s3.py --params 5000000 --reps 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_fit_checkpoint as fit_bench

from tests.seaweedfs import ACCESS_KEY, SECRET_KEY, SeaweedFS


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", type=int, default=5_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--period", type=int, default=20)
    ap.add_argument("--checkpoints", type=int, default=3)
    ap.add_argument("--goal", type=float, default=1.2, help="most S3 / local disk (issue 47)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-fit-s3-") as tmp, \
            SeaweedFS(Path(tmp) / "s3") as s3:
        s3.create_bucket("bench")
        config = Path(tmp) / "s3.yaml"
        config.write_text(yaml.safe_dump({"checkpoint_storage": {
            "type": "s3", "bucket": "bench", "endpoint_url": s3.endpoint_url,
            "access_key": ACCESS_KEY, "secret_key": SECRET_KEY}}))
        where = Path(tmp) / "runs"
        where.mkdir()

        def window(kind: str) -> float:
            if kind == "s3":
                os.environ["DET_CONFIG"] = str(config)
            else:
                os.environ.pop("DET_CONFIG", None)
            return fit_bench.window(args.params, args.period, args.checkpoints, where,
                                    kind != "none")[0]

        window("local")  # warm-up: tracing, the page cache
        window("s3")
        ratios = []
        kinds = ["s3", "local", "none"]
        for rep in range(args.reps):
            order = kinds[rep % 3:] + kinds[:rep % 3]
            w = {k: window(k) for k in order}
            s3_blocked = (w["s3"] - w["none"]) / args.checkpoints
            local_blocked = (w["local"] - w["none"]) / args.checkpoints
            ratios.append(s3_blocked / local_blocked if local_blocked > 0 else float("inf"))
            print(f"round {rep + 1}: blocked per checkpoint S3 {s3_blocked * 1e3:.0f} ms, local "
                  f"disk {local_blocked * 1e3:.0f} ms (windows {w['s3']:.2f} / {w['local']:.2f}"
                  f" / {w['none']:.2f} s): {ratios[-1]:.2f}", flush=True)
    median = statistics.median(ratios)
    print(f"training blocked per checkpoint, S3 / local disk: median {median:.2f} (rounds "
          f"{min(ratios):.2f}-{max(ratios):.2f}): {'OK' if median <= args.goal else 'MISSED'} "
          f"(goal <= {args.goal})")
    return 0 if median <= args.goal else 1


if __name__ == "__main__":
    sys.exit(main())
