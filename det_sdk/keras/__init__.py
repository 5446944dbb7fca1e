"""The Keras API: ``det.keras.init()`` and the context it returns.

Importing this module imports TensorFlow; ``import det_sdk`` alone does not.

>>> import det_sdk as det
>>> context = det.keras.init(hparams={"global_batch_size": 64})
>>> context.distributed.shard_batch_size(context.hparams["global_batch_size"])
64
"""

from det_sdk.errors import CheckpointCorruptError, CheckpointMismatchError, DivergenceError
from det_sdk.keras._context import KerasContext, TrainingContext
from det_sdk.keras._data import ShardedArray
from det_sdk.keras._determined_callback import DeterminedCallback, TensorBoard
from det_sdk.keras._init import init
from det_sdk.keras._trial import (
    InMemorySequence,
    SequenceAdapter,
    TFKerasTensorBoard,
    TFKerasTrial,
    TFKerasTrialContext,
    run_trial,
)
from det_sdk.keras._types import ArrayLike, InputData  # Determined's type-hint names

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
