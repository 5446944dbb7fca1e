"""What each process trains on: the rows of every global batch that are its own.

``wrap_data`` checks and marks arrays; ``fit`` cuts every global batch (``batch_size``
rows per process times the processes) into equal parts, process ``r`` taking the ``r``-th,
in an order that depends on the run's seed and the epoch only. So N processes see
exactly the rows one process would see in each step, and a resumed run continues an epoch
at its next batch. A ``keras.utils.PyDataset`` of the script's is cut the same way, batch
by batch.

>>> import numpy as np
>>> from det_sdk.distributed import SingleProcess
>>> b = EpochBatches.of((np.arange(10.0)[:, None], np.arange(10.0)), batch_size=4,
...                     dist=SingleProcess(), seed=1, shuffle=False)
>>> len(b), b.batches_per_epoch
(3, 3)
>>> b[2][0][:, 0].tolist()
[8.0, 9.0]

A last global batch of arrays that N does not divide is cut into parts one row apart
(the first ones a row more) where the backend weighs each process's gradient by its rows
(``uneven=True``: PyTorch); where a step is one program over equal parts (JAX) it is
refused before the first step, naming the rows to use:

>>> from det_sdk.errors import UsageError
>>> class Two(SingleProcess):
...     def __init__(self, rank): self.rank, self.size = rank, 2
>>> data = (np.arange(11.0)[:, None], np.arange(11.0))
>>> parts = [EpochBatches.of(data, batch_size=3, dist=Two(r), seed=1, shuffle=False,
...                          uneven=True) for r in (0, 1)]
>>> [p[1][1].tolist() for p in parts], [parts[0].global_rows(i) for i in (0, 1)]
([[6.0, 7.0, 8.0], [9.0, 10.0]], [6, 5])
>>> for rows, uneven in ((11, False), (7, True)):  # JAX's case; a process without a row
...     try:
...         EpochBatches.of((np.zeros((rows, 1)),), batch_size=3, dist=Two(0), seed=1,
...                         uneven=uneven)
...     except UsageError as err:
...         print(str(err)[13:77])
11 rows in global batches of 6 leave 5 rows in the last one, whi
7 rows in global batches of 6 leave 1 rows in the last one, fewe
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras
import numpy as np

from det_sdk.distributed import Processes
from det_sdk.errors import ArgumentTypeError, UsageError

__all__ = ["DEFAULT_BATCH_SIZE", "EpochBatches", "as_arrays", "part_of", "rows_of",
           "split_xy", "take_rows", "wrap_data"]


#: ``fit``'s rows per process and step without ``batch_size``: Keras's default
DEFAULT_BATCH_SIZE = 32


def part_of(rows: int, rank: int, size: int) -> tuple[int, int]:
    """Where process ``rank``'s part of a global batch of ``rows`` starts, and its rows:
    equal parts, or, where ``size`` does not divide ``rows``, the first ones a row more.

    >>> [part_of(11, r, 2) for r in (0, 1)]
    [(0, 6), (6, 5)]
    """
    share, extra = divmod(rows, size)
    return rank * share + min(rank, extra), share + (rank < extra)


def as_arrays(data: Any, what: str) -> Any:
    """``data`` (an array, or a list/tuple/dict of them) as numpy arrays, same structure."""
    if data is None:
        return None
    if isinstance(data, Mapping):
        return {k: as_arrays(v, f"{what}[{k!r}]") for k, v in data.items()}
    if isinstance(data, (list, tuple)) and data and not np.isscalar(data[0]) \
            and hasattr(data[0], "__len__"):
        return type(data)(as_arrays(v, f"{what}[{i}]") for i, v in enumerate(data))
    try:
        arr = np.asarray(data)
    except Exception as err:
        raise ArgumentTypeError(f"{what}: not an array ({type(data).__name__}): {err}") from None
    if arr.ndim == 0:
        raise ArgumentTypeError(f"{what}: an array of rows is expected, got a scalar")
    return arr


def _leaves(data: Any) -> list[np.ndarray]:
    if data is None:
        return []
    if isinstance(data, Mapping):
        return [a for v in data.values() for a in _leaves(v)]
    if isinstance(data, (list, tuple)):
        return [a for v in data for a in _leaves(v)]
    return [data]


def rows_of(*parts: Any, what: str = "wrap_data") -> int:
    """The number of rows every array of ``parts`` has; refused if they differ."""
    rows = {len(a) for p in parts for a in _leaves(p)}
    if len(rows) != 1:
        raise UsageError(f"{what}: the arrays have different numbers of rows ({sorted(rows)})")
    return rows.pop()


def take_rows(data: Any, idx: Any) -> Any:
    """Rows ``idx`` (indices or a slice) of every array of ``data`` (nested as given)."""
    if data is None:
        return None
    if isinstance(data, Mapping):
        return {k: take_rows(v, idx) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(take_rows(v, idx) for v in data)
    return data[idx]


def wrap_data(x: Any, y: Any = None, sample_weight: Any = None) -> Any:
    """Arrays checked (same rows) and returned as numpy; a ``PyDataset`` as it is.

    Sharding happens in ``fit``, batch by batch, so the arrays stay whole here.
    """
    if isinstance(x, keras.utils.PyDataset):
        if y is not None or sample_weight is not None:
            raise UsageError("wrap_data: a PyDataset yields its own targets; give x alone")
        return x
    if type(x).__module__.startswith("grain"):
        raise ArgumentTypeError(_GRAIN_REFUSED.format(type(x).__name__))
    if _is_foreign(x):
        raise ArgumentTypeError(
            f"wrap_data: {type(x).__module__}.{type(x).__name__} on JAX and PyTorch: pass "
            "numpy arrays (or lists/dicts of them) or a keras.utils.PyDataset; det_sdk "
            "orders and shards them itself so that resuming and N processes are exact")
    arrays = [as_arrays(p, name) for p, name in ((x, "x"), (y, "y"), (sample_weight,
                                                                     "sample_weight"))]
    rows_of(*arrays)
    given = [a for a, p in zip(arrays, (x, y, sample_weight)) if p is not None]
    return given[0] if len(given) == 1 else tuple(given)


# Keras 3.15 fits a Grain dataset, but Grain's iterator state is its own: det_sdk could
# neither deal its batches out to N processes in its global order nor restart it at a batch
# inside an epoch, so a resume and N processes would not be exact.
_GRAIN_REFUSED = (
    "wrap_data: a Grain {} on JAX and PyTorch is not taken yet: det_sdk cuts every global "
    "batch between the processes and restarts an epoch at any batch itself, which it "
    "cannot do inside a Grain pipeline, so resuming and N processes would not be exact. "
    "Give its rows as numpy arrays, or wrap a grain.MapDataset's random access "
    "(dataset[i]) in a keras.utils.PyDataset")


def _is_foreign(x: Any) -> bool:
    """A data pipeline det_sdk cannot cut and resume exactly here (tf.data, DataLoader)."""
    module = type(x).__module__
    return module.startswith(("tensorflow", "torch.utils.data")) or \
        type(x).__name__ in ("DataLoader", "DatasetV2", "Dataset", "PrefetchDataset")


class EpochBatches(keras.utils.PyDataset):
    """This process's batches of epochs ``epoch`` on, from batch ``first`` of the first one.

    Built by :meth:`of`. ``batches_per_epoch`` is a whole epoch's count; ``len()`` the
    first epoch's (from ``first`` to ``last``). Keras calls ``on_epoch_end`` between
    epochs: the next one is whole, in its own order.
    """

    def __init__(self, source: Any, *, batches_per_epoch: int, batch_for: Any,
                 epoch: int = 0, first: int = 0, last: int | None = None,
                 rows: tuple[int, int] | None = None) -> None:
        super().__init__(workers=1, use_multiprocessing=False)
        self._source = source
        self.batches_per_epoch = batches_per_epoch
        self._batch_for = batch_for  # (epoch, index) -> batch
        self.epoch, self.first = epoch, first
        self.last = batches_per_epoch if last is None else last
        self._rows = rows  # arrays: (a full global batch's rows, the last one's)

    def global_rows(self, index: int) -> int | None:
        """The rows of global batch ``index`` of an epoch, over every process (None: a
        PyDataset's, not known before it is read)."""
        if self._rows is None:
            return None
        return self._rows[1] if index == self.batches_per_epoch - 1 else self._rows[0]

    @classmethod
    def of(cls, data: Any, *, batch_size: int | None, dist: Processes, seed: int,
           shuffle: bool = True, epoch: int = 0, first: int = 0,
           last: int | None = None, uneven: bool = False) -> EpochBatches:
        """The batches of ``data``: a tuple ``(x, y[, sample_weight])`` of arrays, or a
        ``PyDataset`` (whose batches are global ones, each cut between the processes).
        ``uneven``: the last global batch of arrays may be cut into parts one row apart
        (the backend weighs each process's gradient by its rows)."""
        if isinstance(data, keras.utils.PyDataset):
            n = len(data)

            def from_dataset(ep: int, i: int) -> Any:
                return _rows_of_process(data[i], dist, f"batch {i} of the PyDataset")

            return cls(data, batches_per_epoch=n, batch_for=from_dataset, epoch=epoch,
                       first=first, last=last)
        if batch_size is None:
            batch_size = DEFAULT_BATCH_SIZE
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ArgumentTypeError(f"context.fit: batch_size must be a positive int, got "
                                    f"{batch_size!r}")
        rows = rows_of(*data, what="context.fit: x, y")
        global_batch = batch_size * dist.size
        n = -(-rows // global_batch)
        tail = rows - (n - 1) * global_batch
        if tail < dist.size:
            raise UsageError(
                f"context.fit: {rows} rows in global batches of {global_batch} leave "
                f"{tail} rows in the last one, fewer than the {dist.size} processes (each "
                f"must have a row in every step). Use {rows - tail} rows, or a global batch "
                "size that leaves at least one row per process")
        if tail % dist.size and not uneven:
            raise UsageError(
                f"context.fit: {rows} rows in global batches of {global_batch} leave "
                f"{tail} rows in the last one, which {dist.size} processes cannot share "
                "equally (each step must see the same number of rows on every process to "
                f"train what one process trains). Use {rows - tail % dist.size} rows, or a "
                "global batch size that divides the rows")

        orders: dict[int, np.ndarray] = {}  # the latest epoch's (drawn once an epoch)

        def from_arrays(ep: int, i: int) -> Any:
            order = orders.get(ep)
            if order is None:
                order = np.random.default_rng([seed, ep]).permutation(rows) if shuffle \
                    else np.arange(rows)
                orders.clear()
                orders[ep] = order
            idx = order[i * global_batch:(i + 1) * global_batch]
            start, count = part_of(len(idx), dist.rank, dist.size)
            mine = idx[start:start + count]
            return tuple(take_rows(part, mine) for part in data)

        return cls(data, batches_per_epoch=n, batch_for=from_arrays, epoch=epoch,
                   first=first, last=last, rows=(global_batch, tail))

    def __len__(self) -> int:
        return self.last - self.first

    def __getitem__(self, index: int) -> Any:
        return self._batch_for(self.epoch, self.first + index)

    def set_epoch(self, epoch: int) -> None:
        """Train epoch ``epoch`` next (``fit``'s callback says so as each epoch begins:
        Keras calls a PyDataset's own epoch hooks more than once an epoch). The first
        epoch of the call keeps its ``first`` and ``last``; the others are whole."""
        if epoch != self.epoch:
            self.epoch, self.first, self.last = epoch, 0, self.batches_per_epoch

    def on_epoch_end(self) -> None:
        if isinstance(self._source, keras.utils.PyDataset):
            self._source.on_epoch_end()


def _rows_of_process(batch: Any, dist: Processes, what: str) -> Any:
    """Process ``dist.rank``'s equal part of a global batch ``(x, y[, w])``."""
    if dist.size == 1:
        return batch
    parts = batch if isinstance(batch, tuple) else (batch,)
    rows = rows_of(*parts, what=what)
    if rows % dist.size:
        raise UsageError(
            f"context.fit: {what} holds {rows} rows, which {dist.size} processes cannot "
            "share equally: give the PyDataset a batch size that the number of processes "
            "divides (its last batch too)")
    share = rows // dist.size
    mine = np.arange(dist.rank * share, (dist.rank + 1) * share)
    cut = tuple(take_rows(p, mine) for p in parts)
    return cut if isinstance(batch, tuple) else cut[0]


def split_xy(x: Any, y: Any, sample_weight: Any) -> Any:
    """``fit``'s data as the tuple the batches are cut from; a PyDataset as it is."""
    if isinstance(x, keras.utils.PyDataset):
        if y is not None or sample_weight is not None:
            raise UsageError("context.fit: a PyDataset yields its own targets; give x alone")
        return x
    if x is None:
        raise UsageError("context.fit: x is required")
    parts = [as_arrays(x, "x")]
    if y is not None:
        parts.append(as_arrays(y, "y"))
    if sample_weight is not None:
        if y is None:
            raise UsageError("context.fit: sample_weight needs y")
        parts.append(as_arrays(sample_weight, "sample_weight"))
    return tuple(parts)
