"""Benchmark: training blocked per checkpoint when a det_sdk.pytorch Trainer checkpoints to
S3, against the same to the local disk, side by side (issue 47's 1.2x, on the PyTorch
front: the same two-stage checkpoint writer as ``context.fit``'s).

Each round trains, in an alternating order, three ``Trainer.fit`` runs of ``--batches``
batches on a stack of ``Linear`` layers (``--params`` parameters, Adam): checkpoints every
``--period`` batches to an S3 bucket (SeaweedFS, started here), the same to the run's
folder, and no checkpoints. Blocked per checkpoint is (the run's time - the run without
checkpoints) / its checkpoints, the last one's publish waited for (as ``fit`` does at its
end) and counted. The figure is S3's over the local disk's, the median of the rounds.

Where the object server shares the training's cores (this 2-core machine), its work and
the upload's compete with training; on a machine with cores to spare (or a remote store)
they do not. Run it on both and read the two.

    .venv/bin/python scripts/bench/bench_pytorch_fit_s3.py --params 5000000 --reps 3
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pytorch_checkpoint import LinearStack

import det_sdk.pytorch as pytorch
from tests.seaweedfs import ACCESS_KEY, SECRET_KEY, SeaweedFS

WIDTH = 1024  # features per Linear layer: about 1M parameters each


def run_seconds(runs: Path, layers: int, batches: int, period: int | None,
                storage: dict[str, Any] | None) -> float:
    """Seconds of one ``fit`` of ``batches`` batches (checkpoints every ``period``, to
    ``storage``; None: the run's folder), its last checkpoint published."""
    config = {"checkpoint_storage": storage} if storage else None
    with pytorch.init(hparams={"global_batch_size": 16}, runs_dir=runs, seed=1,
                      config=config) as ctx:
        trainer = pytorch.Trainer(LinearStack(ctx, layers, WIDTH, rows=64), ctx)
        t0 = time.perf_counter()
        trainer.fit(max_length=pytorch.Batch(batches),
                    checkpoint_period=pytorch.Batch(period or 10 * batches))
        trainer.writer.wait()
        return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", type=int, default=5_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--period", type=int, default=50)
    ap.add_argument("--goal", type=float, default=1.2, help="most S3 / local disk (issue 47)")
    args = ap.parse_args(argv)
    layers = max(1, round(args.params / (WIDTH * WIDTH + WIDTH)))
    checkpoints = args.batches // args.period
    with tempfile.TemporaryDirectory(prefix="bench-pt-s3-") as tmp_dir, \
            SeaweedFS(Path(tmp_dir) / "s3") as s3:
        tmp = Path(tmp_dir)
        s3.create_bucket("bench")
        bucket = {"type": "s3", "bucket": "bench", "endpoint_url": s3.endpoint_url,
                  "access_key": ACCESS_KEY, "secret_key": SECRET_KEY,
                  "save_trial_latest": 1, "save_trial_best": 0}
        kinds = {"s3": (args.period, bucket), "local": (args.period, None),
                 "none": (None, None)}

        def seconds(kind: str) -> float:
            runs = tmp / f"runs-{kind}"
            period, storage = kinds[kind]
            try:
                return run_seconds(runs, layers, args.batches, period, storage)
            finally:
                shutil.rmtree(runs, ignore_errors=True)

        seconds("local")  # warm-up: allocation, first files
        seconds("s3")
        ratios = []
        for r in range(args.reps):
            order = ["s3", "local", "none"] if r % 2 == 0 else ["none", "local", "s3"]
            took = {kind: seconds(kind) for kind in order}
            blocked = {k: (took[k] - took["none"]) / checkpoints for k in ("s3", "local")}
            ratio = blocked["s3"] / blocked["local"] if blocked["local"] > 0 else float("inf")
            ratios.append(ratio)
            print(f"round {r + 1}: {args.batches} batches, none {took['none']:.2f} s; blocked "
                  f"per checkpoint: S3 {1e3 * blocked['s3']:.0f} ms, local disk "
                  f"{1e3 * blocked['local']:.0f} ms: {ratio:.2f}", flush=True)
    median = statistics.median(ratios)
    ok = median <= args.goal
    print(f"{layers * (WIDTH * WIDTH + WIDTH) / 1e6:.1f}M parameters + Adam, a checkpoint "
          f"every {args.period} batches: S3 / local disk, median {median:.2f} (rounds "
          f"{min(ratios):.2f}-{max(ratios):.2f}; goal <= {args.goal}) "
          f"{'OK' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
