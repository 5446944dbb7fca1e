"""The rows the store hands out, typed: what each table's record holds after decoding.

They are ``TypedDict``\\ s, so a row is still the plain dict that ``app.py``, the web
UI and the tests index by column name, while the master's modules get their columns
checked by a type checker. States are the strings of the enums in ``det_sdk.api``
(``TrialState(row["state"])`` turns one into its enum).

>>> row: TrialRow = {"id": 1, "state": "QUEUED"}  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, TypedDict

__all__ = ["AllocationRow", "CheckpointListRow", "CheckpointRow", "ExperimentRow",
           "ExperimentSummaryRow", "JobRow", "JobSummaryRow", "MetricsRow", "TrialRow"]


class ExperimentRow(TypedDict):
    id: int
    name: str | None
    config: dict[str, Any]
    state: str  # det_sdk.api.ExperimentState
    archive: str  # the uploaded model directory (kept until the experiment is deleted)
    created: float
    ended: float | None
    archived: int  # det experiment archive: left out of lists
    owner_id: int | None  # its creator (NULL: the first admin, det_sdk.master.store.users)
    project_id: int | None  # its project (det_sdk.master.store.workspaces; 1: the default)


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
    checkpoint_note: str | None  # what became of its damaged checkpoints
    keras_backend: str | None  # the Keras backend of its latest checkpoint


class JobRow(TypedDict):
    id: int
    name: str | None
    config: dict[str, Any]
    state: str  # det_sdk.api.JobState
    archive: str
    exit_code: int | None
    created: float
    ended: float | None
    restarts: int
    reactivate: int  # activated while it stopped: queued again once stopped
    rows_done: int | None  # the chief's latest progress report (det_sdk.master.job_progress)
    rows_total: int | None
    output: str | None
    progress_at: float | None
    rate_alloc: str | None  # the allocation whose first report is the rate's base
    rate_rows: int | None
    rate_at: float | None
    owner_id: int | None  # its creator (NULL: the first admin)


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
    rm_id: str | None  # the resource manager's own id of the task (a Slurm job id)
    queue_reason: str | None  # why it still waits in the resource manager's queue
    kill_after: float | None  # a kill's deadline: forced then, by whichever master runs
    preempt_acked: int  # the task acknowledged a stop request: its exit 0 is a stop


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
    stage: str | None  # det_sdk.stages: None is the default stage
    searched: int | None  # 0: a stage the searcher does not measure; None: yes
    damaged: str | None  # why it failed verification on restore; None: intact
    keras_backend: str | None  # the Keras backend that trained it, as reported


# --- what the paged views read (Store.*_page): a few columns, with aggregates -------------


class ExperimentSummaryRow(TypedDict):
    id: int
    name: str | None
    state: str
    created: float
    ended: float | None
    searcher: str | None  # the config's searcher.name, read in SQL (no config is decoded)
    metric: str | None
    smaller_is_better: int | None
    trial_states: dict[str, int]  # how many of its trials are in each state
    trials: int
    progress: float  # the mean of its trials' progress
    best_min: float | None  # the lowest and highest best searcher metric of its trials
    best_max: float | None
    archived: int
    owner_id: int | None  # its creator (NULL: the first admin)
    project_id: int | None  # its project (issue 59)


class JobSummaryRow(TypedDict):
    id: int
    name: str | None
    state: str
    exit_code: int | None
    created: float
    ended: float | None
    entrypoint: str | None
    slots: int | None
    rows_done: int | None
    rows_total: int | None
    user_id: int | None  # its creator (NULL: the first admin)


class CheckpointListRow(CheckpointRow):
    seq: int  # the row's rowid: insertion order, the key the list pages by
    experiment_id: int | None
    storage: str | None  # its experiment's checkpoint_storage, as JSON text
    owner_id: int | None  # its experiment's owner (NULL: the first admin)
