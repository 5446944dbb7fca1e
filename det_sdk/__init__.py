"""det_sdk: train Keras models from one script, on a laptop, under Horovod, or on a cluster.

The same training script runs three ways without a change::

    import det_sdk as det

    context = det.keras.init()          # local, horovodrun, or cluster: detected
    hparams = context.training.hparams
    x, y = context.wrap_data(x, y)
    ...
    history = context.fit(model, x=x, y=y, validation_data=(x_val, y_val))

Importing ``det_sdk`` is cheap and never imports TensorFlow: ``det_sdk.keras``
(which does) is loaded on first attribute access, so ``det.keras.init()``
works after a plain ``import det_sdk as det``.
"""

from __future__ import annotations

import importlib

# ``typing`` costs about 2 ms, a tenth of Python's own start-up: not imported at run time
# (type checkers read ``TYPE_CHECKING`` by name). Goal: ``import det_sdk`` <= 1.05x
# ``python -c pass`` (scripts/bench/bench_import.py).
TYPE_CHECKING = False

#: the package's version, the one source of it (pyproject.toml reads it at build time)
__version__ = "0.1.0"

#: Determined's format for the logging module (``logging.basicConfig(format=det.LOG_FORMAT)``,
#: the first line of its Core API tutorials): level, process id, logger name, message.
LOG_FORMAT = "%(levelname)s: [%(process)s] %(name)s: %(message)s"

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from typing import Any

    from det_sdk import core, errors, keras, pytorch
    from det_sdk.info import ClusterInfo, get_cluster_info
    from det_sdk.predictions import load_predictions
    from det_sdk.pytorch import TrialContext

__all__ = ["LOG_FORMAT", "ClusterInfo", "TrialContext", "__version__", "core", "errors",
           "get_cluster_info", "keras", "load_predictions", "pytorch"]

# name -> module that defines it; loaded on first access so that the import of
# det_sdk stays free of TensorFlow (keras) and of pydantic (info) until used.
_LAZY = {
    "keras": ("det_sdk.keras", None),
    "pytorch": ("det_sdk.pytorch", None),  # imports torch, never TensorFlow
    # Determined's det.TrialContext (the seed PyTorch tutorial's annotation)
    "TrialContext": ("det_sdk.pytorch", "TrialContext"),
    "core": ("det_sdk.core", None),
    "errors": ("det_sdk.errors", None),  # det.errors.DetSdkError, as Determined's det.errors
    "ClusterInfo": ("det_sdk.info", "ClusterInfo"),
    "get_cluster_info": ("det_sdk.info", "get_cluster_info"),
    # streamed context.predict(..., output=DIR)'s rows, in the input's order (numpy only)
    "load_predictions": ("det_sdk.predictions", "load_predictions"),
}


def __getattr__(name: str) -> Any:
    try:
        module_name, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'det_sdk' has no attribute {name!r}") from None
    module = importlib.import_module(module_name)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
