"""This process's share of a step's gradients (0.0 at a step on padding only), which
every averaging optimizer applies before it averages.

>>> float(shared([tf.constant(2.0)])[0])
2.0
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

__all__ = ["AverageFn", "gradient_share", "shared"]

#: Takes a step's gradients (None for variables without one), returns them averaged
#: over all processes.
AverageFn = Callable[[list[Any]], list[Any]]

_gradient_share: Any = None


def gradient_share() -> Any:
    """This process's share in the step under way: a ``tf.Variable``, 1.0, or 0.0 at a
    step where it trains on padding only (its gradients are zeroed before they are
    averaged, so its batch, which carries no sample weights, adds nothing). Set by
    ``_callbacks.UndoPaddingMetrics``; one per process, read by every averaging
    optimizer's step. Multiplying by 1.0 leaves a gradient bit-equal."""
    global _gradient_share
    if _gradient_share is None:
        with tf.init_scope():
            _gradient_share = tf.Variable(1.0, trainable=False, name="det_gradient_share")
    return _gradient_share


def shared(grads: list[Any]) -> list[Any]:
    """``grads``, each times :func:`gradient_share` (IndexedSlices: their values)."""
    share = gradient_share()

    def scale(g: Any) -> Any:
        if g is None:
            return None
        if isinstance(g, tf.IndexedSlices):
            return tf.IndexedSlices(g.values * tf.cast(share, g.values.dtype), g.indices,
                                    g.dense_shape)
        return g * tf.cast(share, g.dtype)

    return [scale(g) for g in grads]
