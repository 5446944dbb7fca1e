"""The rows the store hands out, typed: what each table's record holds after decoding.

They are ``TypedDict``\\ s, so a row is still the plain dict that ``app.py``, the web
UI and the tests index by column name, while the master's modules get their columns
checked by a type checker. States are the strings of the enums in ``det_sdk.api``
(``TrialState(row["state"])`` turns one into its enum).

>>> row: TrialRow = {"id": 1, "state": "QUEUED"}  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, TypedDict

__all__ = ["AllocationRow", "CheckpointRow", "ExperimentRow", "JobRow", "MetricsRow",
           "TrialRow"]


class ExperimentRow(TypedDict):
    id: int
    name: str | None
    config: dict[str, Any]
    state: str  # det_sdk.api.ExperimentState
    archive: str  # the uploaded model directory (deleted when the experiment ends)
    created: float
    ended: float | None


class TrialRow(TypedDict):
    id: int
    experiment_id: int
    hparams: dict[str, Any]
    seed: int
    state: str  # det_sdk.api.TrialState
    restarts: int
    steps_completed: int
    epoch: int
    progress: float
    latest_checkpoint: str | None
    best_metric: float | None
    last_error: str | None
    created: float
    ended: float | None
    bracket: int
    target: int | None  # the length it trains to now (ASHA rung), else max_length
    searcher_done: int


class JobRow(TypedDict):
    id: int
    name: str | None
    config: dict[str, Any]
    state: str  # det_sdk.api.JobState
    archive: str
    exit_code: int | None
    created: float
    ended: float | None


class AllocationRow(TypedDict):
    id: str
    task_type: str  # TRIAL | GENERIC
    trial_id: int | None
    job_id: int | None
    token: str
    state: str  # det_sdk.api.AllocationState
    pid: int | None
    slots: int
    workdir: str | None
    preempt: int
    exit_code: int | None
    started: float
    ended: float | None


class MetricsRow(TypedDict):
    trial_id: int
    grp: str
    steps: int
    epoch: int
    metrics: dict[str, float]  # NaN and infinities decoded back to floats
    time: float


class CheckpointRow(TypedDict):
    uuid: str
    trial_id: int
    steps: int
    epoch: int
    batch: int
    size: int
    metrics: dict[str, float]
    created: float
