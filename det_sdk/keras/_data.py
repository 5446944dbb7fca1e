"""Data for training: sharding per process, and epoch-addressable input pipelines.

``wrap_data`` dispatches on the kind of data and returns the same kind:

* numpy arrays (alone, or lists/dicts of them for multi-input models) become
  :class:`ShardedArray` views of this process's contiguous part, which remember
  where they came from. ``fit`` uses that memory to draw one seeded permutation of
  the *whole* data set per epoch and give each process its part of every batch;
  ``predict`` uses it to put gathered rows back in their original order.
* a ``keras.utils.Sequence`` is returned as is on one process.
* a ``tf.data.Dataset`` is returned as is on one process.

The pipelines ``fit`` builds are addressable by (epoch, batch): a run resumed from
a checkpoint starts exactly where it stopped, in the same data order.
"""

from __future__ import annotations

import logging
import math
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf
import xxhash

from det_sdk.distributed import Processes
from det_sdk.errors import ArgumentTypeError, UsageError
from det_sdk.keras import _compat

__all__ = [
    "ShardedArray",
    "ShardedSequence",
    "array_pipeline",
    "as_per_process",
    "check_not_cut",
    "class_weights",
    "dataset_batch_size",
    "dataset_batches",
    "dataset_sharded_for",
    "full_data",
    "full_rows",
    "is_array_data",
    "is_per_process",
    "is_wrapped",
    "local_part",
    "num_rows",
    "pad_dataset",
    "refuse_same_batches",
    "same_everywhere",
    "sequence_pipeline",
    "sequence_steps",
    "slice_rows",
    "tensors_as_arrays",
    "wrap_data",
]

log = logging.getLogger(__name__)


# --- numpy ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shard:
    """Where a :class:`ShardedArray` sits in the full array it was cut from."""

    full: np.ndarray
    start: int
    stop: int
    rank: int
    size: int


class ShardedArray(np.ndarray):
    """A numpy view of one process's rows that remembers the full array.

    Anything derived from it (arithmetic, slicing, ``astype``, ``[..., None]``) is
    still a ``ShardedArray`` but without ``det_shard``: this process's own data
    (:func:`is_per_process`), whose rows det_sdk no longer knows the origin of.
    ``fit`` trains on it as it is, padding the processes with fewer rows with
    weight-0 rows to the same number of steps; ``evaluate`` and ``predict`` take
    it as this process's part rather than sharding it again.

    Derived arrays carry ``det_size`` (the processes the data was wrapped for),
    ``det_processes`` (their collectives, for :func:`full_rows`) and ``det_cut``: a
    description of the first index that selected *rows* (``[:64]``, a mask, indices)
    rather than keeping all of them in order. Such rows are a different set on N
    processes than on one (each process cuts its own part; ``len()`` is its part's),
    so ``fit``, ``evaluate``, ``predict`` and ``adapt`` refuse them on several
    processes (:func:`check_not_cut`) and say to cut before ``wrap_data``.

    >>> from det_sdk.distributed import SingleProcess
    >>> xs = wrap_data(SingleProcess(), np.arange(10.0)[:, None])
    >>> (xs * 2)[..., 0].det_cut, xs[:4].det_cut, xs[::-1][:, 0].det_cut
    (None, '[:4]', '[::-1]')
    >>> xs[[2, 0, 1]].det_cut  # a permutation too: shuffle before wrap_data (fit shuffles)
    '[<indices>]'

    """

    det_shard: Shard | None
    det_cut: str | None
    det_size: int
    det_processes: Processes | None
    det_warned: bool = False  # check_not_cut's one-process warning given for this array

    def __array_finalize__(self, obj: Any) -> None:
        self.det_shard = None
        self.det_cut = getattr(obj, "det_cut", None)
        self.det_size = getattr(obj, "det_size", 1)
        self.det_processes = getattr(obj, "det_processes", None)

    def __getitem__(self, key: Any) -> Any:
        out = super().__getitem__(key)
        if isinstance(out, ShardedArray) and out.det_cut is None and self.ndim \
                and not _keeps_rows(key):
            out.det_cut = _describe_index(key)
        return out


def _keeps_rows(key: Any) -> bool:
    """Whether ``a[key]`` keeps all rows of ``a``, in order, as rows (columns and new
    trailing axes do; slices with a bound, masks, indices, a row, a new leading axis do
    not).

    Decided from how the index is written, never from the rows it picks: the processes
    hold different numbers of rows (16 and 17), so ``a[:16]`` takes all of one's and
    not the other's, and a decision from the data would differ between the processes
    (one refusing while the other goes on to a collective).

    >>> [_keeps_rows(k) for k in (slice(None), (Ellipsis, None), (slice(None), 1),
    ...                           slice(0, None, 1), ())]
    [True, True, True, True, True]
    >>> [_keeps_rows(k) for k in (slice(None, 4), slice(None, None, -1), 0, None,
    ...                           [0, 1, 2], np.ones(4, bool))]
    [False, False, False, False, False, False]
    """
    if isinstance(key, tuple):
        if not key:
            return True
        key = key[0]
    if key is Ellipsis:
        return True
    return isinstance(key, slice) and key.start in (None, 0) and key.stop is None \
        and key.step in (None, 1)


def _describe_index(key: Any) -> str:
    """How a script wrote a row-selecting index, for error messages.

    >>> _describe_index(slice(-5, None)), _describe_index((np.zeros(3, bool), 0))
    ('[-5:]', '[<boolean mask>, ...]')
    """
    def one(k: Any) -> str:
        if isinstance(k, slice):
            parts = ["" if v is None else str(v) for v in (k.start, k.stop)]
            return ":".join(parts) + ("" if k.step is None else f":{k.step}")
        if k is Ellipsis:
            return "..."
        if isinstance(k, (int, np.integer)) or k is None:
            return str(k)
        arr = np.asarray(k) if isinstance(k, (list, np.ndarray)) else None
        return "<boolean mask>" if arr is not None and arr.dtype == bool else "<indices>"

    first = key[0] if isinstance(key, tuple) and key else key
    more = ", ..." if isinstance(key, tuple) and len(key) > 1 else ""
    return f"[{one(first)}{more}]"


def _shard(arr: np.ndarray, dist: Processes) -> ShardedArray:
    arr = np.asarray(arr)
    n = len(arr)
    start, stop = n * dist.rank // dist.size, n * (dist.rank + 1) // dist.size
    view = arr[start:stop].view(ShardedArray)
    view.det_shard = Shard(full=arr, start=start, stop=stop, rank=dist.rank, size=dist.size)
    view.det_size, view.det_processes = dist.size, dist
    return view


def check_not_cut(struct: Any, where: str) -> None:
    """Refuse arrays cut by rows from ``wrap_data``'s views (see :class:`ShardedArray`)
    when they were wrapped for several processes; on one process (where they are what
    the script means) say once that several would refuse them.

    >>> from det_sdk.distributed import SingleProcess
    >>> xs = wrap_data(SingleProcess(), np.zeros((4, 1)))
    >>> check_not_cut({"x": xs * 2}, "context.fit: x")  # row-preserving: fine
    """
    cut = [a for a in _leaves(struct) if isinstance(a, ShardedArray) and a.det_cut]
    if not cut:
        return
    first = cut[0]
    size = max(a.det_size for a in cut)
    if size > 1:
        raise UsageError(
            f"{where}: rows cut from context.wrap_data's arrays ({first.det_cut}). Each of the "
            f"{size} processes holds 1/{size} of the rows and would cut its own part (len() "
            "is the part's), so the processes together would use a different set of rows "
            "than one process does. Cut the rows before wrap_data, on the whole arrays: e.g. "
            "x_val, y_val = x[-n:], y[-n:]; x, y = context.wrap_data(x[:-n], y[:-n]) (pass "
            "x_val, y_val as they are: det_sdk shares them out), or use validation_split")
    if not getattr(first, "det_warned", False):
        first.det_warned = True
        log.warning("det_sdk: %s: rows cut from context.wrap_data's arrays (%s): right on one "
                    "process, refused on several (each would cut its own part). Cut the rows "
                    "before wrap_data.", where, first.det_cut)


def full_rows(data: Any, where: str) -> Any:
    """``data`` as one process would hold it, for code that needs all of its rows at once
    (a preprocessing layer's ``adapt``): ``wrap_data``'s views give their whole arrays,
    arrays derived from them row by row give every process's rows in rank order (one
    allgather: each process derived the same from its part), datasets ``wrap_data``
    sharded give the whole dataset. Rows cut from views, and datasets built on a
    sharded one, are refused; anything else is returned as it is.

    >>> from det_sdk.distributed import SingleProcess
    >>> xs = wrap_data(SingleProcess(), np.arange(3.0))
    >>> type(full_rows(xs / 2, "adapt")).__name__
    'ndarray'
    """
    if isinstance(data, ShardedArray):
        if data.det_shard is not None:
            return data.det_shard.full
        check_not_cut(data, where)
        if data.det_processes is None or data.det_size == 1:
            return np.asarray(data)
        return data.det_processes.gather_arrays(np.asarray(data))
    if isinstance(data, tf.data.Dataset):
        whole = _SHARDED_DATASETS.get(data)
        if whole is not None:
            return whole
        if _built_on_shard(data):
            raise UsageError(
                f"{where}: the dataset is built on context.wrap_data's shard of a dataset "
                "(this process's 1/N of it), so it would see a different set of rows than one "
                "process does. Build it on the dataset before wrap_data: e.g. "
                "layer.adapt(ds.map(lambda x, y: x)); ds = context.wrap_data(ds)")
    return data


def _leaves(struct: Any) -> list[Any]:
    if isinstance(struct, Mapping):
        return [leaf for v in struct.values() for leaf in _leaves(v)]
    if isinstance(struct, (list, tuple)):
        return [leaf for v in struct for leaf in _leaves(v)]
    return [struct]


def _map(fn: Any, struct: Any) -> Any:
    if isinstance(struct, Mapping):
        mapping_type: Any = type(struct)  # the caller's own kind of mapping
        return mapping_type({k: _map(fn, v) for k, v in struct.items()})
    if isinstance(struct, (list, tuple)):
        return type(struct)(_map(fn, v) for v in struct)
    return fn(struct)


def _lists_as_tuples(struct: Any) -> Any:
    if isinstance(struct, Mapping):
        mapping_type: Any = type(struct)  # the caller's own kind of mapping
        return mapping_type({k: _lists_as_tuples(v) for k, v in struct.items()})
    if isinstance(struct, (list, tuple)):
        return tuple(_lists_as_tuples(v) for v in struct)
    return struct


def is_array_data(x: Any) -> bool:
    """True for a numpy array or a (nested) list/dict of them."""
    leaves = _leaves(x)
    return bool(leaves) and all(isinstance(a, np.ndarray) for a in leaves)


def _check_arrays(named: dict[str, Any]) -> int:
    lengths: dict[str, int] = {}
    for name, struct in named.items():
        if struct is None:
            continue
        leaves = _leaves(struct)
        if not leaves:
            raise UsageError(f"wrap_data: {name} is empty (no arrays in it)")
        for i, leaf in enumerate(leaves):
            where = name if len(leaves) == 1 else f"{name}[{i}]"
            if not isinstance(leaf, np.ndarray):
                raise ArgumentTypeError(
                    f"wrap_data: {where} must be a numpy array (or a list/dict of them) "
                    f"to go with numpy x, got {type(leaf).__name__}"
                )
            if leaf.ndim == 0:
                raise UsageError(f"wrap_data: {where} is a scalar; expected rows of samples")
            lengths[where] = len(leaf)
    distinct = set(lengths.values())
    if len(distinct) > 1:
        detail = ", ".join(f"{k}: {v}" for k, v in lengths.items())
        raise UsageError(f"wrap_data: arrays have different numbers of samples ({detail})")
    n = distinct.pop()
    if n == 0:
        raise UsageError("wrap_data: the data is empty (0 samples)")
    return n


def wrap_data(dist: Processes, x: Any, y: Any = None, sample_weight: Any = None) -> Any:
    """Shard ``x`` (and ``y``, ``sample_weight``) for this process; see the module doc."""
    if isinstance(x, tf.data.Dataset):
        if y is not None or sample_weight is not None:
            raise UsageError("wrap_data: with a tf.data.Dataset, pass only the dataset (its "
                             "elements carry the targets)")
        if dist.size == 1:
            return x
        shard = x.shard(dist.size, dist.rank)
        _SHARDED_DATASETS[shard] = x  # for full_rows (a layer's adapt) and refuse_same_batches
        return shard
    if isinstance(x, _compat.SequenceBase):
        if y is not None or sample_weight is not None:
            raise UsageError("wrap_data: with a keras.utils.Sequence, pass only the sequence (its "
                             "batches carry the targets)")
        if len(x) == 0:
            raise UsageError("wrap_data: the Sequence is empty (len() == 0)")
        return x if dist.size == 1 else ShardedSequence(x, dist.rank, dist.size)
    if x is None:
        raise ArgumentTypeError("wrap_data: x is required")
    if not is_array_data(x):
        raise ArgumentTypeError(
            "wrap_data: expected numpy arrays (or lists/dicts of them), a "
            f"keras.utils.Sequence or a tf.data.Dataset; got {type(x).__name__}"
        )
    named = {"x": x, "y": y, "sample_weight": sample_weight}
    _check_arrays(named)
    if dist.size > 1:
        _refuse_parts(named)
        _check_same_everywhere(dist, named)
    out = [_map(lambda a: _shard(a, dist), s) for s in (x, y, sample_weight) if s is not None]
    return out[0] if len(out) == 1 else tuple(out)


def _refuse_parts(named: dict[str, Any]) -> None:
    """Refuse wrapping arrays that are already one process's part (``wrap_data``'s views
    or arrays derived from them): their digests would differ between the processes
    anyway; this names the fix."""
    for name, struct in named.items():
        if struct is not None and any(isinstance(a, ShardedArray) for a in _leaves(struct)):
            raise UsageError(
                f"wrap_data: {name} comes from context.wrap_data already (this process's "
                "part of the rows, or rows cut from it). Pass the whole arrays: cut or "
                "transform them before wrap_data, then wrap each part once")


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


def _digest(a: np.ndarray) -> str:
    """A content digest of one array (shape, dtype and values)."""
    h = xxhash.xxh3_64(f"{a.shape}{a.dtype.str}".encode())
    if a.dtype.hasobject:  # strings, ragged rows: their text (object bytes are pointers)
        h.update("\x00".join(map(repr, a.ravel().tolist())).encode())
    elif a.size:  # (memoryview cannot cast an empty array's view)
        h.update(np.ascontiguousarray(a).data.cast("B"))
    return h.hexdigest()


def _digests_everywhere(dist: Processes, named: dict[str, Any]
                        ) -> tuple[dict[str, str], list[dict[str, str]]]:
    """This process's digest of each array in ``named`` (by name, ``x[1]`` for a list's
    second), and every process's (one digest per array, xxh3 at about 10 GB/s, and one
    small allgather)."""
    mine = {f"{name}[{i}]" if len(_leaves(struct)) > 1 else name: _digest(leaf)
            for name, struct in named.items() if struct is not None
            for i, leaf in enumerate(_leaves(struct))}
    return mine, dist.allgather(mine)


def same_everywhere(dist: Processes, named: dict[str, Any]) -> bool:
    """True when every process holds the same arrays ``named`` (a collective).

    >>> from det_sdk.distributed import SingleProcess
    >>> same_everywhere(SingleProcess(), {"x": np.zeros(3)})
    True
    """
    mine, every = _digests_everywhere(dist, named)
    return all(theirs == mine for theirs in every)


def _check_same_everywhere(dist: Processes, named: dict[str, Any]) -> None:
    """Refuse arrays that differ between processes: each process keeps its part of *its*
    arrays, so different arrays would give overlapping or missing shards, silently."""
    mine, every = _digests_everywhere(dist, named)
    for where in mine:
        ranks = [r for r, theirs in enumerate(every) if theirs.get(where) != every[0].get(where)]
        if ranks:
            raise UsageError(
                f"wrap_data: {where} differs between the {dist.size} processes (rank "
                f"{ranks[0]}'s is not rank 0's): each process keeps its part of its own "
                "arrays, so the parts would overlap and miss samples. Prepare the same "
                "arrays on every process before wrap_data: load them in the same order, "
                "shuffle or split with a seeded generator (np.random.default_rng(seed), or "
                "np.random after det.keras.init(), which seeds it the same everywhere), "
                "or pass a tf.data.Dataset or Sequence that wrap_data can shard")


def _full(struct: Any) -> Any:
    """The whole arrays behind wrapped views; unwrapped arrays stand for themselves."""
    return _map(lambda a: a.det_shard.full if getattr(a, "det_shard", None) else a, struct)


def full_data(struct: Any) -> Any:
    """The whole arrays behind ``wrap_data``'s views (others: as given)."""
    return _full(struct)


def num_rows(struct: Any) -> int:
    """Number of samples (rows) of array data."""
    return len(_leaves(struct)[0])


def slice_rows(struct: Any, start: int | None, stop: int | None) -> Any:
    """Rows ``[start, stop)`` of every array in ``struct``, as plain arrays."""
    return _map(lambda a: np.asarray(a)[start:stop], struct)


def is_per_process(struct: Any) -> bool:
    """True for arrays that are this process's own data: derived from ``wrap_data``'s views
    (arithmetic, slicing) or mixed with them, rather than the full data or whole views."""
    leaves = _leaves(struct)
    return any(isinstance(a, ShardedArray) for a in leaves) and _shard_geometry(struct) is None


def as_per_process(struct: Any) -> Any:
    """``struct``'s arrays marked as this process's own data (see :func:`is_per_process`)."""
    return _map(lambda a: np.asarray(a).view(ShardedArray), struct)


def is_wrapped(struct: Any) -> bool:
    """True for arrays that ``wrap_data`` returned (views that know their full data)."""
    return _shard_geometry(struct) is not None


def _shard_geometry(struct: Any) -> tuple[int, int] | None:
    """(rank, size) the arrays were wrapped for, or None if they were not wrapped."""
    shards = [getattr(a, "det_shard", None) for a in _leaves(struct)]
    first = shards[0] if shards else None  # an empty list or dict holds no array
    if first is None or not all(shards):
        return None
    return first.rank, first.size


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


def tensors_as_arrays(x: Any) -> Any:
    """``x`` with its leaves as numpy arrays when every leaf is a TensorFlow tensor (rows
    a script made with ``tf.convert_to_tensor``), so that they are shared out as numpy
    rows are; anything else as it is."""
    leaves = _leaves(x)
    if not leaves or not all(isinstance(a, tf.Tensor) and hasattr(a, "numpy")
                             for a in leaves):
        return x
    return _map(lambda a: a.numpy() if isinstance(a, tf.Tensor) else a, x)


def local_part(
    dist: Processes, x: Any, y: Any = None, sample_weight: Any = None,
    where: str = "context.fit: validation_data",
) -> tuple[Any, Any, Any, int | None, bool]:
    """The data this process evaluates or predicts on, for data as a user passes it.

    Returns ``(x, y, sample_weight, rows, in_rank_order)``: ``rows`` is this process's
    sample count (None when unknown), ``in_rank_order`` says that concatenating the
    processes' outputs in rank order restores the original order. Full numpy data is
    sharded here so that N processes do not each predict all of it.
    """
    if is_array_data(x):
        given = [s for s in (x, y, sample_weight) if s is not None]
        check_not_cut(given, where)
        if dist.size > 1 and _shard_geometry(given) is None and not is_per_process(given):
            _check_arrays({"x": x, "y": y, "sample_weight": sample_weight})

            def shard(s: Any) -> Any:
                return None if s is None else _map(lambda a: _shard(a, dist), s)

            x, y, sample_weight = shard(x), shard(y), shard(sample_weight)
        return x, y, sample_weight, len(_leaves(x)[0]), True
    if isinstance(x, ShardedSequence):
        return x, y, sample_weight, None, True
    if isinstance(x, _compat.SequenceBase) and dist.size > 1:
        # A whole Sequence: each process takes its block of batches, as wrap_data does.
        return ShardedSequence(x, dist.rank, dist.size), y, sample_weight, None, True
    return x, y, sample_weight, None, dist.size == 1


# --- keras.utils.Sequence --------------------------------------------------------------------


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
