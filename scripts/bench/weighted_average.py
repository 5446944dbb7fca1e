"""Benchmark: 2 processes' weighted gradient average, with and without the question that
lets alike rows skip the weighting, by the gradients' size.

det_sdk's TensorFlow engine averages the processes' gradients weighted by their batches'
rows (``sum(w_i g_i) / sum(w_i)``). The weighted average costs two passes over the
gradients; asking first whether every process has the same rows (one small collective)
lets a step with alike rows take Horovod's plain average instead, but adds that
collective to every step. This times both, side by side in one run, for gradients of
several sizes, with the rows alike (the common step), and prints the per-step time of
each and their ratio: where the question pays for itself is
``det_sdk.keras._horovod.SKIP_WEIGHTING_FROM``::

    .venv-keras2/bin/python -m det_sdk.launch.horovodrun -np 2 --gloo \\
        .venv-keras2/bin/python scripts/bench/weighted_average.py [--rounds 5]

>>> sizes(2 ** 12, 2 ** 14)
[4096, 8192, 16384]
"""

from __future__ import annotations

import argparse
import statistics

from _timing import per_call


def sizes(smallest: int, largest: int) -> list[int]:
    """Powers of two from ``smallest`` to ``largest`` values."""
    out = [smallest]
    while out[-1] < largest:
        out.append(out[-1] * 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tensors", type=int, default=16, help="gradients per step")
    args = parser.parse_args()

    import tensorflow as tf

    from det_sdk.keras._horovod import SKIP_WEIGHTING_FROM, HorovodProcesses

    dist = HorovodProcesses()
    weight = tf.constant(32.0)  # alike on both processes
    if dist.rank == 0:
        print(f"{'values':>10} {'weighted ms':>12} {'asked ms':>9} {'asked/weighted':>15}"
              f"   (SKIP_WEIGHTING_FROM {SKIP_WEIGHTING_FROM:,})")
    for total in sizes(2 ** 12, 2 ** 24):
        grads = [tf.random.normal([total // args.tensors]) for _ in range(args.tensors)]
        dense = list(range(len(grads)))
        weighted = tf.function(lambda g=grads: dist._weighted(g, None, weight))
        asked = tf.function(
            lambda g=grads, d=dense: dist._alike_or_weighted(g, d, None, weight))
        calls = max(5, min(200, 2 ** 24 // total))
        a, b = [], []
        for _ in range(args.rounds):  # alternating, so that a slower second touches both
            a.append(per_call(weighted, calls))
            b.append(per_call(asked, calls))
        if dist.rank == 0:
            wa, wb = statistics.median(a), statistics.median(b)
            print(f"{total:>10,} {wa * 1e3:>12.3f} {wb * 1e3:>9.3f} {wb / wa:>15.3f}",
                  flush=True)


if __name__ == "__main__":
    main()
