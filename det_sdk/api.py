"""Wire models: the JSON the master and its clients (the SDK, the CLI) exchange.

One module for both sides: the master validates requests with these models and
serves them in its OpenAPI document; the SDK and the CLI build and parse them.

>>> MetricsReport(group="validation", steps_completed=10, metrics={"val_loss": 0.5}).epoch
0
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AllocationInfo",
    "CheckpointInfo",
    "CheckpointReport",
    "CreateExperimentRequest",
    "CreateJobRequest",
    "ExperimentInfo",
    "JobInfo",
    "MetricsReport",
    "PreemptionSignal",
    "ProgressReport",
    "SearcherOperation",
    "TrialInfo",
]

TrialState = Literal[
    "QUEUED", "RUNNING", "PAUSED", "COMPLETED", "CANCELED", "ERROR", "STOPPING_CANCELED",
    "STOPPING_PAUSED",
]
ExperimentState = Literal["ACTIVE", "PAUSED", "COMPLETED", "CANCELED", "ERROR"]
JobState = Literal["QUEUED", "RUNNING", "COMPLETED", "CANCELED", "ERROR"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CreateExperimentRequest(_Model):
    """``POST /api/v1/experiments``: a config (as parsed YAML) and the model directory."""

    config: dict[str, Any]
    model_definition: str = Field(description="base64 of a .tar.gz of the model directory")


class CreateJobRequest(_Model):
    """``POST /api/v1/jobs``: a generic task (``det job run``)."""

    config: dict[str, Any]
    model_definition: str = Field(description="base64 of a .tar.gz of the directory")


class MetricsReport(_Model):
    """``POST /api/v1/trials/{id}/metrics``: one group's metrics at one step.

    The master keeps one value per (trial, group, steps_completed): a report sent
    twice (a retry, or a restarted trial repeating steps) replaces, never adds.
    """

    group: Literal["training", "validation", "evaluation"]
    steps_completed: int = Field(ge=0)
    epoch: int = Field(default=0, ge=0)
    metrics: dict[str, float]


class CheckpointReport(_Model):
    """``POST /api/v1/checkpoints``: a checkpoint written to the trial's storage."""

    uuid: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    trial_id: int
    steps_completed: int = Field(ge=0)
    epoch: int = Field(ge=0)
    batch: int = Field(default=0, ge=0)
    size: int = Field(default=0, ge=0)
    metrics: dict[str, float] = Field(default_factory=dict)


class ProgressReport(_Model):
    """``POST /api/v1/trials/{id}/progress``: fraction of the training length done."""

    progress: float = Field(ge=0, le=1)


class PreemptionSignal(_Model):
    """``GET /api/v1/allocations/{id}/signals/preemption``."""

    preempt: bool


class SearcherOperation(_Model):
    """``GET /api/v1/trials/{id}/searcher/operation``: train to ``length``, then report."""

    unit: Literal["epochs", "batches"]
    length: int
    completed: bool = False


class CompletedOperation(_Model):
    """``POST /api/v1/trials/{id}/searcher/completed_operation``: trained to ``length``;
    the answer is the next :class:`SearcherOperation` (``completed``: stop)."""

    unit: Literal["epochs", "batches"]
    length: int = Field(ge=1)
    searcher_metric: float


class CheckpointInfo(_Model):
    uuid: str
    trial_id: int
    experiment_id: int | None = None
    steps_completed: int
    epoch: int
    batch: int = 0
    size: int = 0
    metrics: dict[str, float] = Field(default_factory=dict)
    created: float
    path: str | None = None


class RungResult(_Model):
    """A trial's searcher metric at one rung of ASHA, and whether it went on from there."""

    rung: int
    metric: float
    promoted: bool
    order: int  # arrival order among all rung results of the master


class SearcherLength(_Model):
    unit: Literal["epochs", "batches"]
    length: int


class TrialInfo(_Model):
    id: int
    experiment_id: int
    state: str
    hparams: dict[str, Any]
    seed: int
    restarts: int = 0
    steps_completed: int = 0
    epoch: int = 0
    progress: float = 0.0
    best_metric: float | None = None
    latest_checkpoint: str | None = None
    last_error: str | None = None
    bracket: int = 0
    searcher_length: SearcherLength | None = None  # what the searcher has it train to now
    rungs: list[RungResult] = Field(default_factory=list)


class ExperimentInfo(_Model):
    id: int
    name: str | None
    state: str
    config: dict[str, Any]
    created: float
    trials: list[TrialInfo] = Field(default_factory=list)
    progress: float = 0.0


class JobInfo(_Model):
    id: int
    name: str | None
    state: str
    config: dict[str, Any]
    created: float
    exit_code: int | None = None


class AllocationInfo(_Model):
    id: str
    task_type: Literal["TRIAL", "GENERIC"]
    trial_id: int | None = None
    job_id: int | None = None
    state: str
