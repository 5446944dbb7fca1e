"""What verifying predictions on every read costs (issue 46): ``load_predictions`` (each
part checked against its xxh3 digest) / the same parts read without any check.

Writes a finished output directory of ``--rows`` rows x 16 float32 in parts of 4,096 rows
(det_sdk.predictions.PartStore, as a streamed predict does), then alternates, for
``--reps`` pairs after one warm-up of each:

- V: ``load_predictions(dir)`` (verified), and ``load_predictions(dir, mmap=True)`` with
  the mapped array read through once (its combined file verified on the read);
- U: the parts concatenated with ``np.load`` (no check), and the combined file mapped
  with ``np.load(mmap_mode="r")`` and read through once.

Prints the median ratio V/U with the interval of the pairs and exits 1 when it is over
the goal (1.5: a read verified costs at most half again an unchecked one).

    .venv/bin/python scripts/bench/bench_load_predictions.py [--reps 7] [--rows 2000000]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from det_sdk.predictions import PartStore, load_predictions, part_stem

GOAL = 1.5


def write(path: Path, rows: int, batch: int = 4096) -> int:
    store = PartStore(path)
    store.begin({"kind": "arrays", "rows": rows, "batch_size": batch, "digest": "b"},
                {"model": "bench"})
    x = np.random.default_rng(0).normal(size=(rows, 16)).astype("float32")
    parts = 0
    for parts, start in enumerate(range(0, rows, batch), 1):
        store.write_part(parts - 1, x[start:start + batch])
    store.finish(parts)
    return parts


def verified(path: Path) -> float:
    t0 = time.perf_counter()
    a = load_predictions(path)
    m = load_predictions(path, mmap=True)
    float(m.sum(dtype=np.float64))
    took = time.perf_counter() - t0
    assert a.shape == m.shape
    return took


def unchecked(path: Path, parts: int) -> float:
    t0 = time.perf_counter()
    a = np.concatenate([np.load(path / f"{part_stem(i)}.npy") for i in range(parts)])
    m = np.load(path / "combined-0.npy", mmap_mode="r")
    float(m.sum(dtype=np.float64))
    took = time.perf_counter() - t0
    assert a.shape == m.shape
    return took


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--rows", type=int, default=2_000_000)
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bench-load-"))
    try:
        parts = write(tmp / "out", args.rows)
        verified(tmp / "out")  # warm-up: makes the combined file, fills the page cache
        unchecked(tmp / "out", parts)
        ratios = []
        for i in range(args.reps):
            times = {}
            for which in ("VU" if i % 2 else "UV"):
                times[which] = verified(tmp / "out") if which == "V" else \
                    unchecked(tmp / "out", parts)
            ratios.append(times["V"] / times["U"])
            print(f"pair {i + 1}: verified {times['V']:.3f}s | unchecked {times['U']:.3f}s | "
                  f"ratio {ratios[-1]:.3f}", flush=True)
        ratios.sort()
        median = statistics.median(ratios)
        print(f"verified / unchecked: {median:.3f} [{ratios[0]:.3f}, {ratios[-1]:.3f}] "
              f"({args.reps} pairs, {args.rows:,} rows x 16 float32 in {parts} parts; "
              f"goal <= {GOAL})")
        return 0 if median <= GOAL else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
