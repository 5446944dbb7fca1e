"""The numpy side of :mod:`det_sdk.keras._data`: :class:`ShardedArray` (one process's
rows that remember the full array they were cut from), the helpers that walk nested
lists and dicts of arrays, and what ``fit``, ``evaluate`` and ``predict`` ask of arrays
(wrapped? this process's own? cut by rows?).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from det_sdk.distributed import Processes
from det_sdk.errors import ArgumentTypeError, UsageError

# the package's logger: check_not_cut's warning is named as before the package was split
log = logging.getLogger(__package__)


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
    >>> from det_sdk.keras._data import wrap_data
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
    >>> from det_sdk.keras._data import wrap_data
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


def tensors_as_arrays(x: Any) -> Any:
    """``x`` with its leaves as numpy arrays when every leaf is a numeric TensorFlow
    tensor (rows a script made with ``tf.convert_to_tensor``), so that they are shared
    out as numpy rows are; anything else as it is. String tensors stay tensors: numpy
    holds them as ``object`` arrays, which Keras's ``predict`` refuses (keras-io's
    FeatureSpace sample, ``"thal": "fixed"``).

    >>> got = tensors_as_arrays({"age": tf.constant([60.0]), "thal": tf.constant(["fixed"])})
    >>> type(got["age"]).__name__, type(got["thal"]).__name__  # a string: all stay tensors
    ('EagerTensor', 'EagerTensor')
    >>> type(tensors_as_arrays({"age": tf.constant([60.0])})["age"]).__name__
    'ndarray'
    """
    leaves = _leaves(x)
    if not leaves or not all(isinstance(a, tf.Tensor) and hasattr(a, "numpy")
                             and a.dtype != tf.string for a in leaves):
        return x
    return _map(lambda a: a.numpy() if isinstance(a, tf.Tensor) else a, x)
