"""Benchmark: what weighting each process's gradients by its rows costs in a training step.

det_sdk's TensorFlow engine averages N processes' gradients weighted by the rows of each
one's batch (``sum(w_i g_i) / sum(w_i)``: an uneven last global batch trains as on one
process). Done plainly that is two passes over every gradient per step, one times the
weight before Horovod's allreduce and one divided by the mean weight after it; since
issue 56 item 9 a model of at least ``SKIP_WEIGHTING_FROM`` gradient values runs them
only at a step whose processes' rows differ, and a full global batch takes Horovod's
plain average (scripts/bench/weighted_average.py times the question that decides).
This measures, side by side in one process, the gradient computation of one ResNet50
step (Horovod's synthetic benchmark's model, at ``--image-size``) against each of those
passes, in rounds, and prints each pass as a fraction of the step (the median over
rounds)::

    .venv-keras2/bin/python scripts/bench/gradient_weighting.py [--rounds 5] [--image-size 32]

>>> round(fraction([1.0, 2.0, 3.0], [0.02, 0.02, 0.06]), 3)
0.02
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from _timing import per_call


def fraction(steps: list[float], passes: list[float]) -> float:
    """The median over rounds of one pass's time over the step's."""
    return statistics.median(p / s for s, p in zip(steps, passes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    import tensorflow as tf
    keras = tf.keras
    size = args.image_size
    model = keras.applications.ResNet50(weights=None, input_shape=(size, size, 3), classes=1000)
    x = tf.random.uniform([args.batch_size, size, size, 3])
    y = tf.random.uniform([args.batch_size], maxval=1000, dtype=tf.int64)
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    weight, mean_weight = tf.Variable(32.0), tf.Variable(32.0)

    @tf.function
    def step() -> list[Any]:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        return tape.gradient(loss, model.trainable_variables)

    grads = step()

    @tf.function
    def times_weight() -> list[Any]:
        return [g * weight for g in grads]

    @tf.function
    def divided() -> list[Any]:
        return [tf.math.divide_no_nan(g, mean_weight) for g in grads]

    steps, multiplies, divides = [], [], []
    for _ in range(args.rounds):  # alternating, so that a slower minute touches all three
        steps.append(per_call(step, args.repeat))
        multiplies.append(per_call(times_weight, args.repeat * 10))
        divides.append(per_call(divided, args.repeat * 10))
    values = sum(int(tf.size(g)) for g in grads)
    print(f"ResNet50 at {size}x{size}, batch {args.batch_size}: {len(grads)} gradients, "
          f"{values:,} values; a step's gradients {statistics.median(steps) * 1e3:.0f} ms")
    print(f"times the weight: {statistics.median(multiplies) * 1e3:.1f} ms, "
          f"{fraction(steps, multiplies):.2%} of the step")
    print(f"divided by the mean weight: {statistics.median(divides) * 1e3:.1f} ms, "
          f"{fraction(steps, divides):.2%} of the step")


if __name__ == "__main__":
    main()
