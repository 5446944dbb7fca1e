"""``keras.utils.Sequence``: one process's block of batches, and the epoch-addressable
pipeline of a Sequence's batches.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from det_sdk.errors import UsageError
from det_sdk.keras import _compat
from det_sdk.keras._data._arrays import _leaves
from det_sdk.keras._data._pipeline import _no_autograph, class_weights


class ShardedSequence(_compat.SequenceBase):
    """One process's contiguous block of another Sequence's batches.

    ``context.fit`` looks through it to the whole Sequence (to share out every
    epoch's batches anew); ``predict`` gathers the blocks back in rank order.
    """

    def __init__(self, seq: Any, rank: int, size: int) -> None:
        super().__init__()
        self.full, self.rank, self.size = seq, rank, size
        n = len(seq)
        self.start, self.stop = n * rank // size, n * (rank + 1) // size

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, i: int) -> Any:
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self.full[self.start + i]

    def on_epoch_end(self) -> None:
        self.full.on_epoch_end()


def _with_weights(batch: Any, keep: float) -> Any:
    """A batch as (x, y, sample_weight), weights multiplied by ``keep`` (0: padding)."""
    if not isinstance(batch, tuple) or len(batch) not in (2, 3):
        raise UsageError("context.fit: with several processes, Sequence batches must be (x, y) or "
                         "(x, y, sample_weight) tuples")
    x, y = batch[0], batch[1]
    n = len(_leaves(x)[0])
    w = batch[2] if len(batch) == 3 else np.ones(n, dtype=np.float32)
    return x, y, np.asarray(w, dtype=np.float32) * keep


def sequence_steps(seq: Any) -> int:
    """Steps per epoch of a Sequence on this process (every process runs as many)."""
    if isinstance(seq, ShardedSequence):
        return math.ceil(len(seq.full) / seq.size)
    return len(seq)


def _as_batch_tuple(batch: Any) -> Any:
    return tuple(batch) if isinstance(batch, list) else batch


def sequence_pipeline(
    seq: Any, *, seed: int, shuffle: bool, start_epoch: int, start_batch: int, end_epoch: int,
    class_weight: Mapping[int, float] | None = None,
) -> tuple[tf.data.Dataset, int]:
    """The batches of a Sequence for epochs [start_epoch, end_epoch), from ``start_batch``.

    A ``tf.data`` pipeline rather than the Sequence itself: Keras's own handling
    differs between majors (Keras 3's ``PyDataset`` calls ``on_epoch_end`` before
    training and caches ``len()``), while this is addressed by (epoch, batch) on
    both, so a resumed run sees the batches an uninterrupted one would have. The
    batch order of epoch ``e`` is drawn from ``(seed, e)`` alone (Keras's own
    ``shuffle`` draws from Python's global RNG, which a resumed process cannot
    reproduce). A :class:`ShardedSequence` is seen through: every epoch's batches
    are dealt out to the processes in turn, each process runs
    ``ceil(batches / processes)`` steps, and one left short trains on a repeated
    batch of weight 0. Batches are fetched by ``workers`` threads (the Sequence's
    own setting, default 1) in order. ``class_weight`` multiplies each row's weight
    by its class's, as in :func:`array_pipeline`.

    Returns the dataset and the number of steps per epoch.
    """
    if isinstance(seq, ShardedSequence):
        full, rank, size = seq.full, seq.rank, seq.size
    else:
        full, rank, size = seq, 0, 1
    n = len(full)
    steps = math.ceil(n / size)
    orders: dict[int, np.ndarray] = {}

    def order(epoch: int) -> np.ndarray:
        if epoch not in orders:
            orders.clear()  # one epoch at a time is enough: the pipeline goes forward
            orders[epoch] = (np.random.default_rng([seed, epoch]).permutation(n) if shuffle
                             else np.arange(n))
        return orders[epoch]

    def batch_at(epoch: int, step: int) -> Any:
        if size == 1 and class_weight is None:
            return _as_batch_tuple(full[int(order(epoch)[step])])
        if size == 1:
            return _with_weights(full[int(order(epoch)[step])], 1.0)
        pos = step * size + rank
        if pos < n:
            return _with_weights(full[int(order(epoch)[pos])], 1.0)
        return _with_weights(full[int(order(epoch)[0])], 0.0)

    probe = batch_at(start_epoch, start_batch if start_batch < steps else 0)
    leaves = tf.nest.flatten(probe)
    dtypes = [tf.as_dtype(np.asarray(a).dtype) for a in leaves]
    # The batch dimension varies (a short last batch); the others are the probe's.
    shapes = [tf.TensorShape([None, *np.shape(a)[1:]]) for a in leaves]

    def fetch(epoch: Any, step: Any) -> list[np.ndarray]:
        batch = batch_at(int(epoch), int(step))
        return [np.asarray(a, dtype=d.as_numpy_dtype)
                for a, d in zip(tf.nest.flatten(batch), dtypes)]

    cw = class_weights(class_weight) if class_weight is not None else None

    @_no_autograph
    def load(epoch: tf.Tensor, step: tf.Tensor) -> Any:
        flat = tf.numpy_function(fetch, [epoch, step], dtypes, stateful=False)
        batch = tf.nest.pack_sequence_as(
            probe, [tf.ensure_shape(t, shape) for t, shape in zip(flat, shapes)])
        if cw is not None:
            batch = (batch[0], batch[1], batch[2] * cw(batch[1]))
        return batch

    @_no_autograph
    def epoch_steps(epoch: tf.Tensor) -> tf.data.Dataset:
        return tf.data.Dataset.range(steps).map(lambda step: (epoch, step))

    workers = max(1, int(getattr(seq, "workers", 1) or 1))
    ds = (
        tf.data.Dataset.range(start_epoch, end_epoch)
        .flat_map(epoch_steps)
        .skip(start_batch)
        .map(load, num_parallel_calls=workers, deterministic=True)
    )
    options = tf.data.Options()
    options.experimental_optimization.apply_default_optimizations = False
    return ds.prefetch(1).with_options(options), steps
