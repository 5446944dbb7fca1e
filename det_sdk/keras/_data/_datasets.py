"""``tf.data`` datasets: the registry of those ``wrap_data`` sharded, the check that the
processes' datasets differ, and counting, padding and looking into pipelines.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import tensorflow as tf
import xxhash

from det_sdk.distributed import Processes
from det_sdk.errors import UsageError
from det_sdk.keras._data._agree import _digest
from det_sdk.keras._data._pipeline import _no_autograph

# Datasets wrap_data sharded -> the whole dataset. Weak keys: a shard dropped by the
# script drops its entry.
_SHARDED_DATASETS: weakref.WeakKeyDictionary[tf.data.Dataset, tf.data.Dataset] = \
    weakref.WeakKeyDictionary()


def _built_on_shard(ds: tf.data.Dataset) -> bool:
    """Whether ``ds`` is, or is built on (``.map``, ``.batch``, ...), a dataset that
    ``wrap_data`` sharded: walks the pipeline's inputs."""
    seen: set[int] = set()
    todo = [ds]
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node in _SHARDED_DATASETS:
            return True
        inputs = getattr(node, "_inputs", None)  # tf.data's own graph walk (private, stable)
        try:
            todo.extend(inputs() if callable(inputs) else [])
        except Exception:  # a dataset kind that cannot list its inputs: nothing to walk
            continue
    return False


def _first_batch_digest(ds: tf.data.Dataset) -> str | None:
    """A digest of ``ds``'s first element (None when empty): one iteration of it."""
    for element in ds.take(1):
        h = xxhash.xxh3_64()
        for part in tf.nest.flatten(element, expand_composites=True):
            h.update(_digest(np.asarray(part.numpy() if hasattr(part, "numpy") else part)).encode())
        return h.hexdigest()
    return None


def refuse_same_batches(dist: Processes, ds: tf.data.Dataset, where: str) -> None:
    """Refuse a dataset not sharded by ``wrap_data`` whose first batch is the same on
    every process: every process would train on the same batches (``init()`` seeds
    TensorFlow alike everywhere, so even a ``shuffle()`` draws alike), N processes
    training one process's batches N times. One iteration of its first batch and one
    small allgather; datasets built on ``wrap_data``'s shard are not iterated.

    Not sharded here: where a shard goes in a pipeline matters (before ``shuffle`` and
    ``batch`` for rows, after for batches), and a Horovod script's ``steps_per_epoch``
    is often divided by the number of processes already; the error names the fixes.
    """
    if dist.size == 1 or _built_on_shard(ds):
        return
    mine = _first_batch_digest(ds)
    every = dist.allgather(mine)
    if mine is not None and all(d == mine for d in every):
        raise UsageError(
            f"{where}: the {dist.size} processes' datasets give the same batches (the same "
            "first batch on every process; init() seeds TensorFlow alike everywhere, so "
            "shuffle() draws alike too): every process would train on the same data. Pass "
            "the dataset through context.wrap_data(ds) (each process takes its part), or "
            "shard it yourself (ds.shard(context.distributed.size, context.distributed.rank))")


def dataset_batches(ds: tf.data.Dataset) -> int:
    """Batches in one pass over ``ds``: its cardinality, else counted (one pass); -1: infinite.

    Counting iterates the dataset once (a reshuffling dataset's next pass then
    draws its second order): done only when the length is not known statically.
    """
    n = int(ds.cardinality())
    if n >= 0:
        return n
    if n == int(tf.data.INFINITE_CARDINALITY):
        return -1
    return int(ds.reduce(np.int64(0), lambda count, _: count + 1))


def pad_dataset(ds: tf.data.Dataset, have: int, want: int) -> tf.data.Dataset:
    """``ds`` with sample weights, followed by ``want - have`` copies of its first batch
    at weight 0: ``want`` batches per pass, so every process runs as many steps.

    Elements must be ``(x, y)`` or ``(x, y, sample_weight)`` tuples.
    """
    spec = ds.element_spec
    if not isinstance(spec, tuple) or len(spec) not in (2, 3):
        raise UsageError(
            "context.fit: the processes' datasets have different numbers of batches; to pad "
            "the shorter ones with weight-0 batches their elements must be (x, y) or (x, y, "
            "sample_weight) tuples. Otherwise give every process as many batches (e.g. "
            "ds.take(n)) or pass steps_per_epoch with a repeated dataset")

    @_no_autograph
    def weighted(*el: Any) -> Any:
        x, y = el[0], el[1]
        n = tf.shape(tf.nest.flatten(x)[0])[0]
        w = tf.cast(el[2], tf.float32) if len(el) == 3 else tf.ones([n], tf.float32)
        return x, y, w

    out = ds.map(weighted)
    if want > have:
        if have == 0:
            raise UsageError("context.fit: this process's dataset is empty while others have "
                             f"{want} batches; give every process some data")
        # One real batch (iterated once at set-up, on every process alike) at weight 0:
        # real inputs keep the loss finite where zeros might not (log, division).
        x, y, w = next(iter(out.take(1)))
        filler = tf.data.Dataset.from_tensors((x, y, w * 0)).repeat(want - have)
        out = out.concatenate(filler)
    return out.apply(tf.data.experimental.assert_cardinality(want))


def dataset_sharded_for(ds: Any, rank: int, size: int) -> bool:
    """True when ``ds`` is a ``tf.data.Dataset`` whose pipeline has ``shard(size, rank)``
    in it (``wrap_data``'s), looked for through its inputs."""
    seen = 0
    while isinstance(ds, tf.data.Dataset) and seen < 100:
        if hasattr(ds, "_num_shards") and hasattr(ds, "_index"):
            try:
                return int(ds._num_shards) == size and int(ds._index) == rank
            except (TypeError, ValueError):
                return False
        ds, seen = getattr(ds, "_input_dataset", None), seen + 1
    return False


def dataset_batch_size(ds: Any) -> int | None:
    """The batch size of the last ``batch`` in ``ds``'s pipeline (through ``map`` and the
    like); None for anything else, or a pipeline that unbatches after it."""
    seen = 0
    while isinstance(ds, tf.data.Dataset) and seen < 100:
        name = type(ds).__name__
        if "Unbatch" in name or "Rebatch" in name:
            return None
        size = getattr(ds, "_batch_size", None)
        if size is not None and "Batch" in name:
            try:
                return int(size)
            except (TypeError, ValueError):
                return None
        ds, seen = getattr(ds, "_input_dataset", None), seen + 1
    return None
