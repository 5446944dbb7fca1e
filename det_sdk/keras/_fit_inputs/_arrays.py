"""Numpy training data: arrays, or lists/dicts of them (multi-input models), either
``wrap_data``'s views of the whole data set or each process's own arrays.

det_sdk batches them itself (``_data.array_pipeline``): one seeded order per epoch,
addressed by (epoch, batch), with weight-0 rows where a process has fewer.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np  # noqa: F401 (doctests)

from det_sdk.distributed import Processes, SingleProcess  # noqa: F401 (doctests)
from det_sdk.errors import UsageError
from det_sdk.keras import _data
from det_sdk.keras._fit_inputs._adapter import DataAdapter
from det_sdk.keras._plan import FitCall

__all__ = ["ArrayAdapter"]

_KERAS_BATCH = 32  # Keras's batch size for numpy input given none

log = logging.getLogger("det_sdk.keras")


@dataclass(frozen=True, eq=False)
class ArrayAdapter(DataAdapter):
    """Numpy arrays. ``padded``: for arrays that are each process's own (not
    ``wrap_data``'s views), the most rows any process has, which every process pads
    to; None otherwise.

    >>> a = ArrayAdapter.shaped(SingleProcess(), {"x": np.zeros((10, 1))}, 0.0)
    >>> a.data["batch_size"], a.steps_per_epoch(), a.padded, a.sample_batch().shape
    (32, 1, None, (10, 1))
    """

    padded: int | None = None

    @classmethod
    def _share_out(cls, dist: Processes, data: dict[str, Any]) -> None:
        """Arrays not passed through ``wrap_data`` that are the same on every process (a
        script written for one process, run on N): each process takes its part of the
        rows, as ``wrap_data`` would, so N processes train what one does. Left as they
        are, each process would train every row: one process's batches N times over, at
        N times the steps of the global batch. Arrays that differ between the processes
        are each one's own (Horovod's habit of a file per rank)."""
        names = [k for k in ("x", "y", "sample_weight") if data.get(k) is not None]
        if dist.size == 1 or _data.is_wrapped([data[k] for k in names]):
            return
        parts = {k: data[k] for k in names}
        if not _data.same_everywhere(dist, parts):
            return
        log.info("context.fit: %s the same on all %d processes and not passed through "
                 "context.wrap_data: each process takes its part of the rows, as "
                 "wrap_data would", "/".join(names), dist.size)
        shared = _as_list(_data.wrap_data(dist, *_by_name(names, list(parts.values()))))
        data.update(zip(names, shared))

    @classmethod
    def _split(cls, dist: Processes, data: dict[str, Any], frac: float) -> None:
        """``validation_split`` for numpy: the last fraction of the data, as Keras does."""
        names = [k for k in ("x", "y", "sample_weight") if data.get(k) is not None]
        wrapped = _data.is_wrapped(data["x"])
        # Split the whole data set (not this process's shard), then shard both parts again.
        parts = [_data.full_data(data[k]) if wrapped else data[k] for k in names]
        n = _data.num_rows(parts[0])
        cut = int(n * (1 - frac))
        if cut == 0 or cut == n:
            raise UsageError(f"context.fit: validation_split={frac} of {n} samples leaves an "
                             "empty training or validation set")
        train = [_data.slice_rows(p, None, cut) for p in parts]
        val = [_data.slice_rows(p, cut, None) for p in parts]
        if wrapped:
            train = _as_list(_data.wrap_data(dist, *_by_name(names, train)))
            val = _as_list(_data.wrap_data(dist, *_by_name(names, val)))
        elif dist.size > 1:
            # Each process's own data: its validation part is its own too (not shared out).
            val = [_data.as_per_process(p) for p in val]
        data.update(zip(names, train))
        data["validation_data"] = tuple(val)

    @classmethod
    def _default_batch_size(cls, dist: Processes, data: dict[str, Any]) -> None:
        """No ``batch_size``: Keras's 32 rows a step, *over all processes*.

        A script written for one process means 32 rows a step. Each of N processes
        takes 32 / N of them, so the step is the one one process trains; 32 rows that
        do not split evenly are refused, naming the fix.
        """
        if data.get("batch_size") is not None:
            return
        if _KERAS_BATCH % dist.size:
            raise UsageError(
                f"context.fit: no batch_size given, and Keras's default of 32 rows a step does "
                f"not split evenly over {dist.size} processes; pass batch_size="
                "context.distributed.shard_batch_size(<global batch size>)")
        data["batch_size"] = _KERAS_BATCH // dist.size

    @classmethod
    def _agree(cls, dist: Processes, data: Mapping[str, Any]) -> dict[str, Any]:
        return {"padded": _padded_rows(dist, data)}

    @property
    def _batch_size(self) -> Any:
        """The batch size as given (or set by ``_default_batch_size``), else Keras's."""
        return self.data.get("batch_size") or _KERAS_BATCH

    def _own_steps(self) -> int | None:
        x = self.x
        if _data.is_wrapped(x):
            rows, size = _data.num_rows(_data.full_data(x)), self.dist.size
        else:
            # the rows every process pads to, agreed once while shaping
            rows, size = self.padded or _data.num_rows(x), 1
        return math.ceil(rows / (self._batch_size * size))

    def _first_padding(self) -> int | None:
        x, bs, dist = self.x, self._batch_size, self.dist
        if self.padded is not None:  # each process's own rows, padded to the most
            mine = math.ceil(_data.num_rows(x) / bs)
            return mine if mine < math.ceil(self.padded / bs) else None
        n, global_batch = _data.num_rows(_data.full_data(x)), bs * dist.size
        last_rows = n - (math.ceil(n / global_batch) - 1) * global_batch
        return math.ceil(n / global_batch) - 1 if dist.rank >= last_rows else None

    def sample_input(self) -> Any:
        return _data.slice_rows(_data.full_data(self.x), 0, 2)

    def sample_batch(self) -> Any:
        x = self.x
        rows = max(1, min(int(self._batch_size), _data.num_rows(x)))
        parts = [_data.slice_rows(_data.full_data(p), 0, rows)
                 for p in (x, self.data.get("y"), self.data.get("sample_weight"))
                 if p is not None]
        return parts[0] if len(parts) == 1 else tuple(parts)

    def call_inputs(self, call: FitCall, seed: int) -> dict[str, Any]:
        """A ``tf.data`` pipeline addressed by (epoch, batch), whose order depends on
        ``seed`` and the epoch alone."""
        data = self.data
        if data.get("steps_per_epoch") is not None:
            raise UsageError("context.fit: steps_per_epoch is not supported with numpy input (an "
                             "epoch is one pass over the arrays)")
        batch_size = self._batch_size
        ds, steps = _data.array_pipeline(
            self.x, data.get("y"), data.get("sample_weight"),
            batch_size=batch_size, seed=seed, shuffle=bool(data.get("shuffle", True)),
            start_epoch=call.initial_epoch, start_batch=call.start_batch, end_epoch=call.epochs,
            padded_rows=self.padded, class_weight=self.class_weight,
        )
        return {"x": ds, "y": None, "sample_weight": None, "batch_size": None,
                "steps_per_epoch": steps - call.start_batch, "shuffle": False,
                "validation_batch_size": data.get("validation_batch_size") or batch_size}


def _padded_rows(dist: Processes, data: Mapping[str, Any]) -> int | None:
    """For arrays that are each process's own (not ``wrap_data``'s views): the most rows
    any process has (a collective). None otherwise.

    >>> _padded_rows(SingleProcess(), {"x": np.zeros((3, 1))}) is None
    True
    """
    x = data.get("x")
    if dist.size == 1 or _data.is_wrapped(
            [s for s in (x, data.get("y"), data.get("sample_weight")) if s is not None]):
        return None
    return max(dist.allgather(_data.num_rows(x)))


def _by_name(names: list[str], parts: list[Any]) -> tuple[Any, Any, Any]:
    """(x, y, sample_weight) from the parts present, None for the missing ones."""
    given = dict(zip(names, parts))
    return given.get("x"), given.get("y"), given.get("sample_weight")


def _as_list(parts: Any) -> list[Any]:
    return list(parts) if isinstance(parts, tuple) else [parts]
