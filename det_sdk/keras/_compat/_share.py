"""This process's share of a step's gradients (0.0 at a step on padding only), which
every averaging optimizer applies before it averages.

>>> float(shared([tf.constant(2.0)])[0])
2.0
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import tensorflow as tf

__all__ = ["AverageFn", "MixinBase", "combined", "divided_loss", "gradient_share", "shared"]

if TYPE_CHECKING:
    # The averaging mixins stand before an optimizer class in its MRO: typed as Any, their
    # super() calls reach that class's methods (which mypy cannot see: Keras has no types)
    MixinBase = Any
else:
    MixinBase = object

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

    return [_times(g, share) for g in grads]


# --- a loss-scaled step's loss divided by the process count ---------------------------------
#
# Under ``mixed_float16`` a loss-scale optimizer multiplies the loss by its scale before
# the backward pass, which runs in float16. Each process's loss is the mean over its own
# rows: every row's float16 gradient is N times what one process computes for it on the
# global batch, so it overflows (and the step is skipped, the scale halved) where one
# process's does not. Divided by N before the backward pass, each row's gradient is
# exactly one process's (N a power of two: a division by N is exact), and the processes'
# gradients are summed (the average times N) instead of averaged: the same update, the
# same overflows, the same skips as one process on the global batch.


def divided_loss(opt: Any, loss: Any) -> Any:
    """``loss`` divided by the process count when ``opt`` (the outermost, averaging,
    optimizer) is a loss-scale optimizer; marks the step so that :func:`combined` sums.

    The mark is a Python attribute, set and read while one step is traced (or run
    eagerly): a step whose ``train_step`` never scales its loss averages as before."""
    processes = getattr(opt, "_det_divide_loss_by", None)
    if not processes or getattr(opt, "_det_average", None) is None:
        return loss
    opt._det_loss_divided = True
    return loss / tf.cast(processes, loss.dtype)


def combined(opt: Any, grads: list[Any]) -> list[Any]:
    """The processes' gradients averaged by ``opt``'s average, or summed (the average
    times the process count) where this step's loss was divided (:func:`divided_loss`)."""
    averaged = opt._det_average(shared(grads))
    if not getattr(opt, "_det_loss_divided", False):
        return list(averaged)
    opt._det_loss_divided = False
    return [_times(g, float(opt._det_divide_loss_by)) for g in averaged]


def _times(g: Any, factor: Any) -> Any:
    if g is None:
        return None
    if isinstance(g, tf.IndexedSlices):
        return tf.IndexedSlices(g.values * tf.cast(factor, g.values.dtype), g.indices,
                                g.dense_shape)
    return g * tf.cast(factor, g.dtype)
