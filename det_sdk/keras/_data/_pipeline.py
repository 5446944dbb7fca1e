"""The epoch-addressable pipeline of numpy data: batches addressed by (epoch, batch), the
order of each epoch drawn from (seed, epoch) alone, so that a resumed run starts where it
stopped, in the same order; and Keras's ``class_weight`` as a per-row weight.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from det_sdk.errors import UsageError
from det_sdk.keras._data._arrays import (
    _full,
    _leaves,
    _lists_as_tuples,
    _shard_geometry,
    check_not_cut,
)

# The pipeline's functions have no control flow on tensor values: converting them
# with AutoGraph only costs a few hundred ms at the first fit of every process.
_no_autograph = tf.autograph.experimental.do_not_convert


def array_pipeline(
    x: Any,
    y: Any,
    sample_weight: Any,
    *,
    batch_size: int,
    seed: int,
    shuffle: bool,
    start_epoch: int,
    start_batch: int,
    end_epoch: int,
    padded_rows: int | None = None,
    class_weight: Mapping[int, float] | None = None,
) -> tuple[tf.data.Dataset, int]:
    """Batches of numpy data for epochs [start_epoch, end_epoch), from batch ``start_batch``.

    Each epoch draws a permutation of the whole data from ``(seed, epoch)`` alone, so
    the order does not depend on what ran before in this process: a resumed run sees
    the batches an uninterrupted run would have. Arrays from ``wrap_data`` are
    permuted as the full data set and each process takes its part of every global
    batch; other arrays are this process's data as given.

    Every process runs the same number of steps (Horovod's collectives hang
    otherwise). When the last global batch has fewer samples than processes, a
    process left without one trains on one padding row: no sample is dropped, none
    counts twice. Its weight is 0 when the batches carry sample weights (the user's,
    or ``class_weight``'s); otherwise the batches are what Keras would pass (``x``
    alone, or ``(x, y)``: no weights added, so a custom ``train_step`` sees what it
    sees on one process) and the step's gradients are zeroed on that process
    instead (``_compat.gradient_share``, set by ``_callbacks.UndoPaddingMetrics``).

    Arrays that are each process's own (not wrapped, or derived from wrapped
    views) are permuted on their own; ``padded_rows`` (the most rows any process
    has, agreed by the caller) sets the steps, and a process with fewer rows
    trains on weight-0 padding rows in the batches it has no rows for.

    ``class_weight`` multiplies each row's weight by its class's (the class index:
    ``y`` itself, or its argmax when one-hot), as Keras's ``class_weight`` does.

    Returns the dataset and the number of steps per epoch.
    """
    check_not_cut([s for s in (x, y, sample_weight) if s is not None], "context.fit: x, y")
    geometry = _shard_geometry([s for s in (x, y, sample_weight) if s is not None])
    rank, size = geometry or (0, 1)
    may_pad = size > 1 or padded_rows is not None
    if class_weight is not None and y is None:
        raise UsageError("context.fit: class_weight needs y (the targets whose classes it weighs)")
    if class_weight is not None and sample_weight is None:
        sample_weight = np.ones(len(_leaves(_full(x))[0]), dtype=np.float32)
    weighted = sample_weight is not None
    if weighted and y is None:
        raise UsageError("context.fit: sample_weight needs y (targets)")
    # tf.data takes a list for one tensor to stack: several inputs go as a tuple.
    data = tuple(_lists_as_tuples(_full(s)) for s in (x, y, sample_weight) if s is not None)
    n = len(_leaves(data)[0])
    global_batch = batch_size * size
    steps = math.ceil(max(n, padded_rows or 0) / global_batch)
    pad = steps * global_batch - n
    seed_t = tf.constant(seed, tf.int64)

    @_no_autograph
    def epoch_batches(epoch: tf.Tensor) -> tf.data.Dataset:
        order = tf.range(n, dtype=tf.int64)
        if shuffle:
            order = tf.random.experimental.stateless_shuffle(order, seed=tf.stack([seed_t, epoch]))
        order = tf.concat([order, tf.fill([pad], tf.constant(-1, tf.int64))], 0)
        rows = tf.reshape(order, [steps, global_batch])[:, rank::size]
        return tf.data.Dataset.from_tensor_slices(rows)

    @_no_autograph
    def real_rows(row: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        real = tf.boolean_mask(row, row >= 0)
        if not may_pad:
            return real, tf.ones_like(real, tf.float32)
        empty = tf.equal(tf.size(real), 0)
        idx = tf.cond(empty, lambda: tf.zeros([1], tf.int64), lambda: real)
        keep = tf.cond(empty, lambda: tf.zeros([1]), lambda: tf.ones_like(real, tf.float32))
        return idx, keep

    indices = (
        tf.data.Dataset.range(start_epoch, end_epoch)
        .flat_map(epoch_batches)
        .skip(start_batch)
        .map(real_rows)
    )
    # from_tensors(...).repeat() hands the same tensors to every batch without
    # embedding the arrays in the graph (as Keras does for its own numpy input).
    tensors = tf.data.Dataset.from_tensors(data).repeat()
    cw = class_weights(class_weight) if class_weight is not None else None

    @_no_autograph
    def gather(rows: tuple[tf.Tensor, tf.Tensor], arrays: Any) -> Any:
        idx, keep = rows
        batch = tf.nest.map_structure(lambda a: tf.gather(a, idx), arrays)
        if weighted:  # zero the weight of a padding row
            w = batch[2] * tf.cast(keep, batch[2].dtype)
            if cw is not None:
                w = w * tf.cast(cw(batch[1]), w.dtype)
            batch = (*batch[:2], w)
        # x alone goes as Keras passes it: the tensor (or the tuple of inputs), not (x,)
        return batch[0] if len(batch) == 1 and not isinstance(batch[0], tuple) else batch

    ds = tf.data.Dataset.zip((indices, tensors)).map(
        gather, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )
    # tf.data's default graph rewrites buy nothing for this small graph but cost
    # tens of ms each time fit builds an iterator; Keras turns them off for its own
    # numpy input too.
    options = tf.data.Options()
    options.experimental_optimization.apply_default_optimizations = False
    return ds.prefetch(tf.data.AUTOTUNE).with_options(options), steps


def class_weights(class_weight: Mapping[int, float]) -> Any:
    """A TF function: targets of a batch -> each row's class weight (1.0 for classes not
    named). One-hot (or probability) targets use their argmax, as Keras does.

    >>> fn = class_weights({0: 1.0, 1: 3.0})
    >>> fn(tf.constant([[0.0], [1.0]])).numpy().tolist()
    [1.0, 3.0]
    """
    if not isinstance(class_weight, Mapping) or not class_weight:
        raise UsageError("context.fit: class_weight must be a dict {class: weight}, got "
                         f"{class_weight!r}")
    top = max(int(k) for k in class_weight)
    table = np.ones(top + 1, dtype=np.float32)
    for k, v in class_weight.items():
        table[int(k)] = float(v)
    table_t = tf.constant(table)

    def lookup(y: Any) -> tf.Tensor:
        if isinstance(y, (Mapping, list, tuple)):
            raise UsageError("context.fit: class_weight works with a single output's targets; for "
                             "several outputs pass sample weights per output")
        y = tf.convert_to_tensor(y)
        if y.shape.rank is not None and y.shape.rank > 1 and (y.shape[-1] or 1) > 1:
            idx = tf.argmax(y, axis=-1)
        else:
            idx = tf.reshape(tf.cast(tf.round(tf.cast(y, tf.float32)), tf.int64), [-1])
        return tf.gather(table_t, tf.clip_by_value(idx, 0, top))

    return lookup
