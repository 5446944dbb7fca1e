"""Determined 0.38's ``determined.experimental``: its Python SDK (``client``) over
det_sdk's master.

>>> from det_sdk.experimental import client
>>> callable(client.get_experiment)
True
"""

from det_sdk.experimental import client
from det_sdk.experimental.client import (
    Checkpoint,
    Comparison,
    Determined,
    Experiment,
    ExperimentState,
    LogLevel,
    Model,
    ModelVersion,
    OrderBy,
    Trial,
    TrialMetrics,
    User,
)

__all__ = ["Checkpoint", "Comparison", "Determined", "Experiment", "ExperimentState", "LogLevel",
           "Model", "ModelVersion", "OrderBy", "Trial", "TrialMetrics", "User", "client"]
