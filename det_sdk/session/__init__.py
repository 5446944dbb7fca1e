"""The session seam: how a training process talks to whatever keeps its records.

Off the cluster that is a local run directory; on the cluster the master over
HTTP. The Keras context holds one ``Session`` and never asks which one.

A local run directory (default ``./det-runs/<run-id>/``)::

    run.json            run id, seed, hparams, config, created
    metrics.jsonl       one JSON object per report: group, steps_completed, epoch, metrics
    checkpoints.jsonl   one JSON object per checkpoint: uuid, steps_completed, epoch, metrics
    deleted.jsonl       one JSON object per checkpoint retention deleted: uuid, time
    checkpoints/<uuid>/ the checkpoints themselves (see det_sdk.keras checkpoint format)
    tensorboard/        TensorBoard event files

>>> import tempfile
>>> runs = tempfile.mkdtemp()
>>> s = LocalSession.create(runs, hparams={"lr": 0.1}, seed=7, config={})
>>> s.run_id
1
>>> s.report_metrics("validation", steps_completed=10, epoch=1, metrics={"val_loss": 0.5})
>>> [r["metrics"] for r in s.read_metrics()]
[{'val_loss': 0.5}]
"""

from det_sdk.session.base import DEFAULT_RUNS_DIR, MetricGroup, RunNotFoundError, Session
from det_sdk.session.local import LocalSession
from det_sdk.session.master import MasterSession
from det_sdk.session.runs import find_runs_dir_checkpoint, list_runs, resolve_run_dir

__all__ = [
    "DEFAULT_RUNS_DIR",
    "LocalSession",
    "MasterSession",
    "MetricGroup",
    "RunNotFoundError",
    "Session",
    "find_runs_dir_checkpoint",
    "list_runs",
    "resolve_run_dir",
]
