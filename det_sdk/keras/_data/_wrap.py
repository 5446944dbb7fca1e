"""The entry points: ``wrap_data`` (shard data for this process), ``full_rows`` (all of it
back, for a layer's ``adapt``) and ``local_part`` (the part this process evaluates or
predicts on).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from det_sdk.distributed import Processes
from det_sdk.errors import ArgumentTypeError, UsageError
from det_sdk.keras import _compat
from det_sdk.keras._data._agree import _check_same_everywhere
from det_sdk.keras._data._arrays import (
    ShardedArray,
    _check_arrays,
    _leaves,
    _map,
    _shard,
    _shard_geometry,
    check_not_cut,
    is_array_data,
    is_per_process,
)
from det_sdk.keras._data._datasets import _SHARDED_DATASETS, _built_on_shard
from det_sdk.keras._data._sequence import ShardedSequence


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
