"""The arguments of ``context.fit``, made into what each ``model.fit`` call gets.

Pure functions over the user's keyword arguments: validation data, the split of
numpy data, steps per epoch, and the data of one planned call positioned at its
start (epoch, batch). No state: the loop (``_loop``) owns that.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np  # noqa: F401 (doctests)
import tensorflow as tf

from det_sdk.config import Length
from det_sdk.distributed import Processes, SingleProcess  # noqa: F401 (doctests)
from det_sdk.errors import UsageError
from det_sdk.keras import _compat, _data
from det_sdk.keras._plan import FitCall

__all__ = [
    "batch_rows",
    "call_inputs",
    "check_same_steps",
    "default_batch_size",
    "even_out_dataset",
    "first_padding_step",
    "fold_validation_data",
    "length_in_steps",
    "local_validation",
    "padded_rows",
    "split_arrays",
    "steps_per_epoch",
    "take_class_weight",
    "validation_period",
    "validation_rows",
]


def padded_rows(dist: Processes, kwargs: dict[str, Any]) -> int | None:
    """For numpy input that is each process's own (not ``wrap_data``'s views): the most
    rows any process has, which every process pads to (a collective). None otherwise.

    >>> padded_rows(SingleProcess(), {"x": np.zeros((3, 1))}) is None
    True
    """
    x = kwargs.get("x")
    if dist.size == 1 or not _data.is_array_data(x) or _data.is_wrapped(
            [s for s in (x, kwargs.get("y"), kwargs.get("sample_weight")) if s is not None]):
        return None
    return max(dist.allgather(_data.num_rows(x)))


def first_padding_step(
    dist: Processes, kwargs: dict[str, Any], padded: int | None,
    dataset_padding: int | None = None,
) -> int | None:
    """The first step of each epoch at which this process trains on padding only (and every
    later one of the epoch), or None. Keras's ``metrics`` ignore sample weights, so
    those steps' metric updates are undone (``_callbacks.UndoPaddingMetrics``).

    >>> first_padding_step(SingleProcess(), {"x": np.zeros((3, 1))}, None) is None
    True
    """
    if dist.size == 1:
        return None
    x = kwargs.get("x")
    bs = kwargs.get("batch_size") or 32
    if _data.is_array_data(x):
        if padded is not None:  # each process's own rows, padded to the most
            mine = math.ceil(_data.num_rows(x) / bs)
            return mine if mine < math.ceil(padded / bs) else None
        n, global_batch = _data.num_rows(_data.full_data(x)), bs * dist.size
        last_rows = n - (math.ceil(n / global_batch) - 1) * global_batch
        return math.ceil(n / global_batch) - 1 if dist.rank >= last_rows else None
    if isinstance(x, _data.ShardedSequence):
        n, steps = len(x.full), math.ceil(len(x.full) / x.size)
        mine = math.ceil((n - x.rank) / x.size)
        return mine if mine < steps else None
    return dataset_padding


def even_out_dataset(dist: Processes, kwargs: dict[str, Any]) -> int | None:
    """Give every process's ``tf.data.Dataset`` as many batches per pass (a collective).

    Shards rarely split evenly (``shard()`` of 17 batches: 9 and 8). The counts are
    agreed by allgather; a shorter dataset is padded with weight-0 batches (see
    ``_data.pad_dataset``). Infinite datasets need ``steps_per_epoch`` on every process.
    Returns the first padding batch of this process (None: no padding).
    """
    x = kwargs.get("x")
    if dist.size == 1 or not isinstance(x, tf.data.Dataset):
        return None
    counts = dist.allgather(_data.dataset_batches(x))
    listing = ", ".join(f"rank {r}: {'infinite' if c < 0 else c}" for r, c in enumerate(counts))
    if all(c < 0 for c in counts):
        if not kwargs.get("steps_per_epoch"):
            raise UsageError("context.fit: the training dataset repeats for ever; pass "
                             "steps_per_epoch (the same on every process)")
        return None
    if any(c < 0 for c in counts):
        raise UsageError("context.fit: some processes' datasets are infinite and others not "
                         f"({listing}); repeat() every process's dataset or none")
    if len(set(counts)) == 1:
        return None
    kwargs["x"] = _data.pad_dataset(x, counts[dist.rank], max(counts))
    return counts[dist.rank] if counts[dist.rank] < max(counts) else None


def take_class_weight(kwargs: dict[str, Any]) -> dict[int, float] | None:
    """Pop ``class_weight`` where det_sdk applies it itself (numpy and Sequence input,
    whose pipelines already carry sample weights; Keras refuses both at once).
    A ``tf.data.Dataset`` keeps it for Keras."""
    if isinstance(kwargs.get("x"), tf.data.Dataset):
        return None
    return kwargs.pop("class_weight", None)


def local_validation(dist: Processes, kwargs: dict[str, Any]) -> None:
    """Validation data as this process's part: full numpy arrays and Sequences are shared
    out (each sample validated once over all processes, whose metric states are then
    summed); wrapped views, per-process arrays and datasets are each process's own."""
    data = kwargs.get("validation_data")
    if dist.size == 1 or data is None:
        return
    parts = data if isinstance(data, tuple) else (data,)
    x, y, sw = (*parts, None, None)[:3]
    x, y, sw, _, _ = _data.local_part(dist, x, y, sw)
    kwargs["validation_data"] = tuple(p for p in (x, y, sw) if p is not None) \
        if isinstance(data, tuple) else x


def batch_rows(x: Any, batch_size: int | None) -> Callable[[int], float] | None:
    """Rows of each batch Keras makes of numpy ``x`` (``batch_size``, default 32): batch
    ``i`` -> its rows (the last may be short). None for other data.

    >>> batch_rows(np.zeros((10, 1)), 4)(2)
    2
    """
    if not _data.is_array_data(x):
        return None
    n, bs = _data.num_rows(x), batch_size or 32
    return lambda i: max(0, min(bs, n - i * bs))


def validation_rows(kwargs: dict[str, Any]) -> Callable[[int], float] | None:
    """:func:`batch_rows` of this process's validation data in ``fit``."""
    data = kwargs.get("validation_data")
    x = data[0] if isinstance(data, tuple) and data else data
    return batch_rows(x, kwargs.get("validation_batch_size") or kwargs.get("batch_size"))


def check_same_steps(dist: Processes, seg_kwargs: dict[str, Any]) -> None:
    """Every process must run the same number of steps, or Horovod hangs: check first."""
    if dist.size == 1:
        return
    steps = seg_kwargs.get("steps_per_epoch")
    x = seg_kwargs.get("x")
    # After even_out_dataset every process has as many batches: a dataset of unknown
    # length counts as equal here (-2 everywhere); different known lengths cannot occur.
    if steps is None and isinstance(x, _compat.SequenceBase):
        steps = len(x)
    elif steps is None and isinstance(x, tf.data.Dataset):
        steps = int(x.cardinality())
    every = dist.allgather(steps)
    if len(set(every)) > 1:
        raise UsageError(
            "context.fit: the processes would run different numbers of steps per epoch "
            f"({', '.join(f'rank {r}: {s}' for r, s in enumerate(every))}); Horovod needs "
            "the same on all. Pass the same steps_per_epoch on every process (or none: "
            "det_sdk then pads the shorter data to the longest)."
        )


def steps_per_epoch(dist: Processes, kwargs: dict[str, Any]) -> int | None:
    """Batches per epoch of the training input, when it can be known up front."""
    x = kwargs.get("x")
    if kwargs.get("steps_per_epoch"):
        return int(kwargs["steps_per_epoch"])
    if _data.is_array_data(x):
        if _data.is_wrapped(x):
            rows, size = _data.num_rows(_data.full_data(x)), dist.size
        else:
            rows, size = padded_rows(dist, kwargs) or _data.num_rows(x), 1
        return math.ceil(rows / ((kwargs.get("batch_size") or 32) * size))
    if isinstance(x, _compat.SequenceBase):
        return _data.sequence_steps(x)
    if isinstance(x, tf.data.Dataset):
        n = int(x.cardinality())
        return n if n > 0 else None
    return None


def fold_validation_data(kwargs: dict[str, Any]) -> None:
    """Fold the proposal's ``x_val``/``y_val`` into ``validation_data``.

    Validation data is optional, as in ``model.fit``: a fit without it trains and
    records training metrics; what needs a validation metric (a searcher's
    operations, the best checkpoint) says so where it needs it."""
    x_val, y_val = kwargs.pop("x_val", None), kwargs.pop("y_val", None)
    if x_val is not None or y_val is not None:
        if kwargs.get("validation_data") is not None:
            raise UsageError("context.fit: give validation data once: either validation_data or "
                             "x_val/y_val, not both")
        if x_val is None:
            raise UsageError("context.fit: y_val was given without x_val")
        kwargs["validation_data"] = x_val if y_val is None else (x_val, y_val)


def default_batch_size(dist: Processes, kwargs: dict[str, Any]) -> None:
    """Numpy data without ``batch_size``: Keras's 32 rows a step, *over all processes*.

    Keras batches numpy input by 32 when no ``batch_size`` is given; a script written for
    one process means 32 rows a step. Each of N processes takes 32 / N of them, so the
    step is the one one process trains; 32 rows that do not split evenly are refused,
    naming the fix.

    >>> kw = {"x": np.zeros((8, 1))}; default_batch_size(SingleProcess(), kw); kw["batch_size"]
    32
    """
    if kwargs.get("batch_size") is not None or not _data.is_array_data(kwargs.get("x")):
        return
    if 32 % dist.size:
        raise UsageError(
            f"context.fit: no batch_size given, and Keras's default of 32 rows a step does "
            f"not split evenly over {dist.size} processes; pass batch_size="
            "context.distributed.shard_batch_size(<global batch size>)")
    kwargs["batch_size"] = 32 // dist.size


def split_arrays(dist: Processes, kwargs: dict[str, Any]) -> None:
    """``validation_split`` for numpy: the last fraction of the data, as Keras does."""
    frac = kwargs.pop("validation_split", 0.0) or 0.0
    if not frac:
        return
    if not 0 < frac < 1:
        raise UsageError(f"context.fit: validation_split must be in (0, 1), got {frac}")
    if not _data.is_array_data(kwargs.get("x")):
        raise UsageError("context.fit: validation_split works with numpy arrays only; pass "
                         "validation_data for a Sequence or tf.data.Dataset")
    names = [k for k in ("x", "y", "sample_weight") if kwargs.get(k) is not None]
    wrapped = _data.is_wrapped(kwargs["x"])
    # Split the whole data set (not this process's shard), then shard both parts again.
    parts = [_data.full_data(kwargs[k]) if wrapped else kwargs[k] for k in names]
    n = _data.num_rows(parts[0])
    cut = int(n * (1 - frac))
    if cut == 0 or cut == n:
        raise UsageError(f"context.fit: validation_split={frac} of {n} samples leaves an empty "
                         "training or validation set")
    train = [_data.slice_rows(p, None, cut) for p in parts]
    val = [_data.slice_rows(p, cut, None) for p in parts]
    if wrapped:
        train = _as_list(_data.wrap_data(dist, *_by_name(names, train)))
        val = _as_list(_data.wrap_data(dist, *_by_name(names, val)))
    elif dist.size > 1:
        # Each process's own data: its validation part is its own too (not to be shared out).
        val = [_data.as_per_process(p) for p in val]
    kwargs.update(zip(names, train))
    kwargs["validation_data"] = tuple(val)


def _by_name(names: list[str], parts: list[Any]) -> tuple[Any, Any, Any]:
    """(x, y, sample_weight) from the parts present, None for the missing ones."""
    given = dict(zip(names, parts))
    return given.get("x"), given.get("y"), given.get("sample_weight")


def _as_list(parts: Any) -> list[Any]:
    return list(parts) if isinstance(parts, tuple) else [parts]


def call_inputs(
    kwargs: dict[str, Any], call: FitCall, seed: int, *, padded: int | None = None,
    class_weight: dict[int, float] | None = None,
) -> dict[str, Any]:
    """The data arguments of one ``model.fit`` call, positioned at its start.

    Numpy arrays and Sequences become ``tf.data`` pipelines addressed by (epoch,
    batch) whose order depends on ``seed`` and the epoch alone; a Dataset is
    skipped to the batch. ``padded``: see :func:`padded_rows`; ``class_weight``:
    see :func:`take_class_weight`.
    """
    x = kwargs.get("x")
    shuffle = kwargs.get("shuffle", True)
    out: dict[str, Any] = {"validation_freq": call.validate_epochs}
    if _data.is_array_data(x):
        if kwargs.get("steps_per_epoch") is not None:
            raise UsageError("context.fit: steps_per_epoch is not supported with numpy input (an "
                             "epoch is one pass over the arrays)")
        batch_size = kwargs.get("batch_size") or 32
        ds, steps = _data.array_pipeline(
            x, kwargs.get("y"), kwargs.get("sample_weight"),
            batch_size=batch_size, seed=seed, shuffle=bool(shuffle),
            start_epoch=call.initial_epoch, start_batch=call.start_batch, end_epoch=call.epochs,
            padded_rows=padded, class_weight=class_weight,
        )
        out.update(x=ds, y=None, sample_weight=None, batch_size=None,
                   steps_per_epoch=steps - call.start_batch, shuffle=False)
        out.setdefault("validation_batch_size", kwargs.get("validation_batch_size") or batch_size)
    elif isinstance(x, _compat.SequenceBase):
        ds, steps = _data.sequence_pipeline(
            x, seed=seed, shuffle=bool(shuffle), start_epoch=call.initial_epoch,
            start_batch=call.start_batch, end_epoch=call.epochs, class_weight=class_weight,
        )
        out.update(x=ds, steps_per_epoch=steps - call.start_batch, shuffle=False)
    elif isinstance(x, tf.data.Dataset):
        if call.start_batch:
            steps = kwargs.get("steps_per_epoch") or int(x.cardinality())
            if steps < 0:
                raise UsageError("context.fit: cannot resume a tf.data.Dataset of unknown length "
                                 "in mid-epoch; pass steps_per_epoch")
            out.update(x=x.skip(call.start_batch), steps_per_epoch=steps - call.start_batch)
    elif x is None:
        raise UsageError("context.fit: x (the training data) is required")
    return out


def validation_period(configured: Length | None, kwargs: dict[str, Any]) -> Length | None:
    """The config's ``min_validation_period``, else Keras's ``validation_freq`` (an int);
    None without validation data (nothing to validate: no extra stops mid-epoch)."""
    freq = kwargs.pop("validation_freq", None)
    if kwargs.get("validation_data") is None:
        return None
    if configured is not None:
        return configured
    if freq is None or freq == 1:
        return None
    if not isinstance(freq, int) or freq < 1:
        raise UsageError(f"context.fit: validation_freq must be a positive int, got {freq!r} (or "
                         "set min_validation_period in the config)")
    return Length(epochs=freq)


def length_in_steps(length: Length | None, steps: int | None) -> int | None:
    if length is None or steps is None:
        return length.batches if length is not None else None
    return length.epochs * steps if length.epochs is not None else length.batches


