"""Preprocessing layers adapted on ``wrap_data``'s data adapt over all the rows.

``norm.adapt(x_train)`` after ``x_train, y_train = context.wrap_data(...)`` (keras-io's
habit: adapt where the training data is at hand) would see this process's 1/N of the
rows on N processes, and ``fit`` then broadcasts rank 0's state: a ``Normalization``
mean of 125.3917 instead of 125.4143 on keras-io's vision transformer. Keras gives no
hook into ``adapt``, so the ``adapt`` of each preprocessing layer class is wrapped once
(the first ``wrap_data``), to hand the layer its data as one process holds it
(``_data.full_rows``): the whole arrays behind a view, every process's rows of arrays
derived from views (one allgather: ``adapt`` is called on every process, as scripts
call everything), the whole dataset behind a sharded one. Data that does not come
from ``wrap_data`` passes through untouched, so the wrapper changes nothing for it.
Rows cut from views, and pipelines built on a sharded dataset, are refused with the fix
(adapt before ``wrap_data``).

>>> from det_sdk.distributed import SingleProcess
>>> from det_sdk.keras import _compat, _data
>>> adapt_over_all_rows()
>>> norm = _compat.keras.layers.Normalization(axis=None)
>>> norm.adapt(_data.wrap_data(SingleProcess(), np.array([1.0, 3.0])))
>>> float(np.asarray(norm.mean).ravel()[0])
2.0
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
from collections.abc import Callable
from typing import Any

import numpy as np  # noqa: F401 (doctests)

from det_sdk.distributed import Processes
from det_sdk.keras import _compat, _data

__all__ = ["adapt_over_all_rows", "adapting_classes"]

log = logging.getLogger("det_sdk.keras")

_lock = threading.Lock()
_MARK = "__det_over_all_rows__"
_installed = False  # every wrap_data asks; the classes are scanned once
# The processes of the run (set by init): a dataset batched by shard_batch_size's share
# is adapted on the global batches it was split from
_processes: Processes | None = None


def adapting_classes() -> list[type]:
    """The layer classes that define their own ``adapt`` (``Normalization``,
    ``Discretization``, the lookups' base, ``TextVectorization``, Keras 2's
    ``PreprocessingLayer``, ...): found in ``keras.layers`` and their bases, so that
    a layer this module does not name is covered too."""
    layer = _compat.keras.layers.Layer
    found: dict[int, type] = {}
    for name in dir(_compat.keras.layers):
        cls = getattr(_compat.keras.layers, name, None)
        if not (inspect.isclass(cls) and issubclass(cls, layer)):
            continue
        for base in cls.__mro__:
            if "adapt" in vars(base) and callable(vars(base)["adapt"]):
                found[id(base)] = base
    return list(found.values())


def adapt_over_all_rows(processes: Processes | None = None) -> None:
    """Wrap every preprocessing layer class's ``adapt`` (once per process; idempotent);
    ``processes``: the run's (init gives them, before any adapt)."""
    global _installed, _processes
    if processes is not None:
        _processes = processes
    if _installed:
        return
    with _lock:
        for cls in adapting_classes():
            adapt = vars(cls)["adapt"]
            if not getattr(adapt, _MARK, False):
                cls.adapt = _over_all_rows(adapt)  # type: ignore[attr-defined]
        _installed = True


def _over_all_rows(adapt: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(adapt)
    def over_all_rows(self: Any, *args: Any, **kwargs: Any) -> Any:
        where = f"{type(self).__name__}.adapt"
        if args:
            args = (_as_one_process_sees(args[0], where), *args[1:])
        elif "data" in kwargs:
            kwargs["data"] = _as_one_process_sees(kwargs["data"], where)
        return adapt(self, *args, **kwargs)

    setattr(over_all_rows, _MARK, True)
    return over_all_rows


def _as_one_process_sees(data: Any, where: str) -> Any:
    """``data``'s rows as one process holds them (``_data.full_rows``), and a dataset
    batched by ``shard_batch_size``'s share (``batch(shard_batch_size(32))``: 16 rows on 2
    processes) in the global batches one process would batch it by: Discretization's
    quantiles and Normalization's merged moments depend on the batches ``adapt`` reads
    (keras-io's FeatureSpace on 2 processes: bin boundaries 0.21 apart, before)."""
    data = _data.full_rows(data, where)
    dist = _processes
    if dist is None or dist.size == 1:
        return data
    share = _data.dataset_batch_size(data)
    whole = dist.global_batch_of(share) if share is not None else None
    if whole is None or whole == share:
        return data
    log.info("det_sdk: %s reads the dataset in the global batches of %d rows it was split "
             "from (shard_batch_size(%d) = %d on %d processes), as one process would",
             where, whole, whole, share, dist.size)
    return data.unbatch().batch(whole)
