"""The one place that picks Keras 2's or Keras 3's implementations.

:mod:`._keras2` and :mod:`._keras3` define the same names, each for its Keras; the
modules of this package call them through :data:`impl` and never ask which Keras
runs themselves.

>>> impl.__name__.rsplit(".", 1)[-1] in ("_keras2", "_keras3")
True
"""

from __future__ import annotations

import importlib
from types import ModuleType

from det_sdk.keras._compat._version import KERAS_MAJOR

__all__ = ["impl"]

#: ``_keras3`` on Keras 3, ``_keras2`` on Keras 2.
impl: ModuleType = importlib.import_module(
    "det_sdk.keras._compat._keras3" if KERAS_MAJOR >= 3 else "det_sdk.keras._compat._keras2")
