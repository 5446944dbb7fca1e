"""The callbacks ``context.fit`` (and ``DeterminedCallback``) put around the script's:
thin adapters between Keras's hooks and the :class:`det_sdk.keras._fit_run.FitRun` that
owns the fit, one module per family:

- :mod:`.position`: ``TrackPosition`` (tells the FitRun what Keras did), ``StopAt``;
- :mod:`.processes`: N processes that train as one (metrics, statistics, the guard);
- :mod:`.records`: History, metrics and progress reports, TensorBoard scalars;
- :mod:`.checkpoints`: periodic checkpoints and the stop on a signal or the master's
  request;
- :mod:`.script`: the script's ``Sequence`` and unsaved random draws.

>>> from det_sdk.keras._fit_run import FitRun
>>> run = FitRun(None, None, checkpoints=False)
>>> cb = TrackPosition(run)
"""

from det_sdk.keras._callbacks._base import DetCallback
from det_sdk.keras._callbacks.checkpoints import (
    BatchPeriodCheckpoint,
    PeriodicCheckpoint,
    StopOnSignal,
    last_batch_of_epoch,
    periodic_checkpoint,
)
from det_sdk.keras._callbacks.position import ResumedEpoch, StopAt, TrackPosition
from det_sdk.keras._callbacks.processes import (
    AggregateMetrics,
    AverageMovingStatistics,
    AverageStepOutputs,
    CheckInSync,
    UndoPaddingMetrics,
    aggregated_results,
    chief_only_callbacks,
    combine_logs,
)
from det_sdk.keras._callbacks.records import (
    MetricsReporter,
    RecordHistory,
    ScalarEventFile,
    TensorBoardScalars,
    split_logs,
)
from det_sdk.keras._callbacks.script import SequenceEpochEnd, WarnUnsavedRandomness

__all__ = [
    "AggregateMetrics",
    "AverageMovingStatistics",
    "AverageStepOutputs",
    "BatchPeriodCheckpoint",
    "CheckInSync",
    "DetCallback",
    "MetricsReporter",
    "PeriodicCheckpoint",
    "RecordHistory",
    "ResumedEpoch",
    "ScalarEventFile",
    "SequenceEpochEnd",
    "StopAt",
    "StopOnSignal",
    "TensorBoardScalars",
    "TrackPosition",
    "UndoPaddingMetrics",
    "WarnUnsavedRandomness",
    "aggregated_results",
    "chief_only_callbacks",
    "combine_logs",
    "last_batch_of_epoch",
    "periodic_checkpoint",
    "split_logs",
]
