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
import threading
from collections.abc import Callable
from typing import Any

import numpy as np  # noqa: F401 (doctests)

from det_sdk.keras import _compat, _data

__all__ = ["adapt_over_all_rows", "adapting_classes"]

_lock = threading.Lock()
_MARK = "__det_over_all_rows__"
_installed = False  # every wrap_data asks; the classes are scanned once


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


def adapt_over_all_rows() -> None:
    """Wrap every preprocessing layer class's ``adapt`` (once per process; idempotent)."""
    global _installed
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
            args = (_data.full_rows(args[0], where), *args[1:])
        elif "data" in kwargs:
            kwargs["data"] = _data.full_rows(kwargs["data"], where)
        return adapt(self, *args, **kwargs)

    setattr(over_all_rows, _MARK, True)
    return over_all_rows
