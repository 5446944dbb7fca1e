"""The Keras API: ``det.keras.init()`` and the context it returns.

``init()`` trains on the backend Keras runs on (``KERAS_BACKEND``: TensorFlow, JAX or
PyTorch; see docs/backends.md). Importing this module imports no framework; the names
below that belong to the TensorFlow engine (``DeterminedCallback``, ``TFKerasTrial``,
...) import TensorFlow when first used.

>>> import det_sdk as det
>>> context = det.keras.init(hparams={"global_batch_size": 64})
>>> context.distributed.shard_batch_size(context.hparams["global_batch_size"])
64
"""

from __future__ import annotations

import importlib
from typing import Any

from det_sdk.errors import CheckpointCorruptError, CheckpointMismatchError, DivergenceError
from det_sdk.keras._entry import init

# name -> the module that defines it; imported when the name is first used (PEP 562)
_LAZY = {
    "KerasContext": "det_sdk.keras._context",
    "TrainingContext": "det_sdk.keras._training",
    "ShardedArray": "det_sdk.keras._data",
    "DeterminedCallback": "det_sdk.keras._determined_callback",
    "TensorBoard": "det_sdk.keras._determined_callback",
    "InMemorySequence": "det_sdk.keras._trial",
    "SequenceAdapter": "det_sdk.keras._trial",
    "TFKerasTensorBoard": "det_sdk.keras._trial",
    "TFKerasTrial": "det_sdk.keras._trial",
    "TFKerasTrialContext": "det_sdk.keras._trial",
    "run_trial": "det_sdk.keras._trial",
    "ArrayLike": "det_sdk.keras._types",  # Determined's type-hint names
    "InputData": "det_sdk.keras._types",
}

__all__ = [
    "ArrayLike",
    "CheckpointCorruptError",
    "CheckpointMismatchError",
    "DeterminedCallback",
    "DivergenceError",
    "InMemorySequence",
    "InputData",
    "KerasContext",
    "SequenceAdapter",
    "ShardedArray",
    "TFKerasTensorBoard",
    "TFKerasTrial",
    "TFKerasTrialContext",
    "TensorBoard",
    "TrainingContext",
    "init",
    "run_trial",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'det_sdk.keras' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
