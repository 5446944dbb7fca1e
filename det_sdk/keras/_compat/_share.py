"""This process's share of a step's gradients (0.0 at a step on padding only) and its
weight in their average (the rows of its batch), which every averaging optimizer applies.

Keras's losses are means over a process's own rows. Where a global batch splits unevenly
(a dataset's last batch: 16 rows on one process, 2 on the other), the plain average of
the processes' gradients weighs the 2 rows as much as the 16; one process weighs each of
the 18 rows alike. So each process's gradients are weighted by its rows and the sum
divided by the rows of all: ``sum(rows_i * g_i) / sum(rows_i)``, which is the plain
average where the rows are equal (exactly so for a power of two) and one process's
update where they are not. The rows are read from the batch by :func:`count_rows`.

>>> float(scaled(tf.constant(2.0), gradient_share()))  # a share of 1.0: unchanged
2.0
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import tensorflow as tf

__all__ = ["AverageFn", "MixinBase", "batch_rows", "combined", "count_rows", "divided_loss",
           "gradient_share", "leading_rows", "scaled", "weigh_alike"]

if TYPE_CHECKING:
    # The averaging mixins stand before an optimizer class in its MRO: typed as Any, their
    # super() calls reach that class's methods (which mypy cannot see: Keras has no types)
    MixinBase = Any
else:
    MixinBase = object

#: Takes a step's gradients, this process's own (None for variables without one), and, as
#: ``weight=``, this process's weight in their average (None: all alike); returns their
#: weighted average over all processes, ``sum(w_i g_i) / sum(w_i)``.
AverageFn = Callable[..., list[Any]]

_gradient_share: Any = None
_batch_rows: Any = None


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


def batch_rows() -> Any:
    """The rows of this process's batch in the step under way (a ``tf.Variable``; 0.0
    until a step of a model :func:`count_rows` watches has set it: then every process
    weighs alike, as before rows were counted)."""
    global _batch_rows
    if _batch_rows is None:
        with tf.init_scope():
            _batch_rows = tf.Variable(0.0, trainable=False, name="det_batch_rows")
    return _batch_rows


def leading_rows(data: Any) -> Any:
    """The rows of a batch as ``train_step`` receives it (the leading dimension of its
    first tensor), or None where it has none (a scalar, no tensor at all).

    >>> float(leading_rows((tf.zeros([5, 3]), tf.zeros([5]))))
    5.0
    >>> leading_rows({"n": 3}) is None
    True
    """
    for item in tf.nest.flatten(data):
        if isinstance(item, tf.SparseTensor):
            return tf.cast(item.dense_shape[0], tf.float32)
        if isinstance(item, tf.RaggedTensor):
            return tf.cast(item.nrows(), tf.float32)
        if isinstance(item, (tf.Tensor, tf.Variable)) and item.shape.rank != 0:
            return tf.cast(tf.shape(item)[0], tf.float32)
        return None
    return None


def weigh_alike() -> None:
    """Every process weighs alike from now on, until a step of a model
    :func:`count_rows` watches counts its rows: for a training that does not count them
    (``DeterminedCallback``'s, whose processes split each batch evenly), so that no
    process keeps the row count of another fit's last step."""
    batch_rows().assign(0.0)


def count_rows(model: Any) -> bool:
    """Make ``model``'s ``train_step`` record its batch's rows (:func:`batch_rows`) before
    it runs, once; True if it changed (a train function made before does not record
    them: make it anew). The model's own ``train_step`` (a custom one too) runs as it is.
    """
    step = model.train_step
    if getattr(step, "_det_counts_rows", False):
        return False

    def train_step(data: Any) -> Any:
        rows = leading_rows(data)
        if rows is not None:
            batch_rows().assign(rows)
        return step(data)

    train_step._det_counts_rows = True  # type: ignore[attr-defined]
    # an instance attribute: Keras's train function calls ``self.train_step(data)``
    object.__setattr__(model, "train_step", train_step)
    batch_rows()  # made now, outside any traced step
    return True


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
    rows = batch_rows()
    # 0 rows: a model whose steps do not count them (every process weighs alike)
    weight = gradient_share() * tf.where(rows > 0.0, rows, tf.ones_like(rows))
    averaged = opt._det_average(list(grads), weight=weight)
    if not getattr(opt, "_det_loss_divided", False):
        return list(averaged)
    opt._det_loss_divided = False
    return [scaled(g, float(opt._det_divide_loss_by)) for g in averaged]


def scaled(g: Any, factor: Any) -> Any:
    """``g`` times ``factor`` (IndexedSlices: their values; None stays None).

    >>> float(scaled(tf.constant(3.0), 2.0))
    6.0
    """
    if g is None:
        return None
    if isinstance(g, tf.IndexedSlices):
        return tf.IndexedSlices(g.values * tf.cast(factor, g.values.dtype), g.indices,
                                g.dense_shape)
    return g * tf.cast(factor, g.dtype)
