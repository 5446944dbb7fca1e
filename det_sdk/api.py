"""Wire models: the JSON the master and its clients (the SDK, the CLI) exchange.

One module for both sides: the master validates requests with these models and
serves them in its OpenAPI document; the SDK and the CLI build and parse them.

>>> MetricsReport(group="validation", steps_completed=10, metrics={"val_loss": 0.5}).epoch
0
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    StrictBool,
    WithJsonSchema,
)

from det_sdk.errors import UsageError
from det_sdk.wire import (
    MAX_METRIC_NAME_CHARS,
    MAX_METRICS_PER_REPORT,
    decode_metric,
    encode_metric,
    to_wire,
)

__all__ = [
    "DEFAULT_METRICS_LIMIT",
    "DEFAULT_PAGE_LIMIT",
    "MAX_INT",
    "MAX_METRICS_LIMIT",
    "MAX_PAGE_LIMIT",
    "AllocationInfo",
    "AllocationState",
    "CheckpointInfo",
    "CheckpointPage",
    "CheckpointReport",
    "CreateExperimentRequest",
    "CreateExperimentResponse",
    "CreateJobRequest",
    "ErrorBody",
    "ExperimentInfo",
    "ExperimentPage",
    "ExperimentState",
    "ExperimentSummary",
    "JobInfo",
    "JobPage",
    "JobState",
    "JobSummary",
    "LatestMetrics",
    "LaunchTensorBoardRequest",
    "MetricGroup",
    "MetricsReport",
    "MetricsRow",
    "PreemptionSignal",
    "ProgressReport",
    "SearcherOperation",
    "TensorBoardInfo",
    "TrialInfo",
    "TrialPage",
    "TrialState",
    "decode_metric",
    "encode_metric",
]

# The largest integer the API takes: JSON's exact integers (2**53 - 1, as JavaScript's
# Number.MAX_SAFE_INTEGER; also within SQLite's 64 bits). Anything larger is refused
# with its field rather than rounded by a client or overflowing the database.
MAX_INT = 2**53 - 1

# Pages: a list answers at most this many rows at a time (``limit``), newest first, and
# an opaque ``next_cursor`` to ask for the next page with; what one request costs does
# not grow with the history the master keeps.
DEFAULT_PAGE_LIMIT = 100
MAX_PAGE_LIMIT = 1000
# A trial's metrics (steps order, ``after_steps``): rows are small and charts want many.
DEFAULT_METRICS_LIMIT = 1000
MAX_METRICS_LIMIT = 10_000


class _State(str, Enum):
    """A state name that prints as itself (``str(TrialState.RUNNING) == "RUNNING"``)."""

    def __str__(self) -> str:
        return self.value


class TrialState(_State):
    """Where a trial is in its life (``det_sdk.master.lifecycle`` holds the transitions).

    ``STOPPING_*``: asked to stop, its process has not exited yet.
    """

    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    STOPPING_PAUSED = "STOPPING_PAUSED"
    PAUSED = "PAUSED"
    STOPPING_CANCELED = "STOPPING_CANCELED"
    CANCELED = "CANCELED"
    COMPLETED = "COMPLETED"
    ERROR = "ERROR"


class ExperimentState(_State):
    """An experiment's state: what is true of its trials, not what was last asked.

    ``STOPPING_PAUSED`` until every trial asked to pause has stopped, then ``PAUSED``;
    ``STOPPING_CANCELED`` until every killed trial has stopped, then ``CANCELED``.
    """

    ACTIVE = "ACTIVE"
    STOPPING_PAUSED = "STOPPING_PAUSED"
    PAUSED = "PAUSED"
    STOPPING_CANCELED = "STOPPING_CANCELED"
    CANCELED = "CANCELED"
    COMPLETED = "COMPLETED"
    ERROR = "ERROR"


class JobState(_State):
    """A generic job's state (``det job run``): pause and kill stop its process first
    (``STOPPING_PAUSED``, ``STOPPING_CANCELED``), then ``PAUSED`` or ``CANCELED``."""

    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    STOPPING_PAUSED = "STOPPING_PAUSED"
    PAUSED = "PAUSED"
    STOPPING_CANCELED = "STOPPING_CANCELED"
    COMPLETED = "COMPLETED"
    CANCELED = "CANCELED"
    ERROR = "ERROR"


class AllocationState(_State):
    """A launched process (group): its task token works only while it is RUNNING."""

    RUNNING = "RUNNING"
    EXITED = "EXITED"


# --- numbers on the wire -------------------------------------------------------------------
#
# JSON has no NaN or infinity, yet a diverging model reports them: they travel as the
# strings "NaN", "Infinity" and "-Infinity" (JavaScript's spelling) and are floats again
# on either side (det_sdk.wire: the encoder, and how such values rank). Booleans are
# refused where a number is expected (pydantic would take ``false`` as 0).


def _no_bool(v: Any) -> Any:
    if isinstance(v, bool):
        raise UsageError("expected a number, not a boolean")
    return v


Metric = Annotated[
    float,
    BeforeValidator(decode_metric),
    PlainSerializer(encode_metric, when_used="json"),
    WithJsonSchema({"anyOf": [{"type": "number"},
                              {"type": "string", "enum": ["NaN", "Infinity", "-Infinity"]}]}),
]
Number = Annotated[float, BeforeValidator(_no_bool)]
# A reported metric's name (det_sdk.wire.check_metrics checks it in the training process)
MetricName = Annotated[str, Field(min_length=1, max_length=MAX_METRIC_NAME_CHARS)]
# An untyped value (a config's, a hyperparameter's): answered with its non-finite floats in
# the wire form, whichever path serialises it (model_dump(mode="json") keeps them floats)
JsonValue = Annotated[Any, PlainSerializer(to_wire, when_used="json")]
Count = Annotated[int, BeforeValidator(_no_bool), Field(ge=0, le=MAX_INT)]


class _Model(BaseModel):
    # A float outside a Metric field (a config's or hyperparameter's .nan) answers in the
    # same wire form as metrics: "NaN", "Infinity", "-Infinity" (pydantic's default: null).
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")


class CreateExperimentRequest(_Model):
    """``POST /api/v1/experiments``: a config (as parsed YAML) and the model directory."""

    config: dict[str, Any]
    model_definition: str = Field(description="base64 of a .tar.gz of the model directory")
    activate: bool = Field(True, description="false: created PAUSED, as Determined's "
                           "`det e create --paused` (`det e activate` starts it)")
    project_id: Annotated[int, BeforeValidator(_no_bool)] | None = Field(
        None, ge=1, le=MAX_INT, description="its project (Determined's `--project_id`); "
        "absent: the config's `workspace`/`project`, else Uncategorized")


class CreateExperimentResponse(_Model):
    """The new experiment's id, and warnings about its config (Determined fields that
    det_sdk accepted but ignores); ``det experiment create`` prints them."""

    id: int
    warnings: list[str] = Field(default_factory=list)


class CreateJobRequest(_Model):
    """``POST /api/v1/jobs``: a generic task (``det job run``)."""

    config: dict[str, Any]
    model_definition: str = Field(description="base64 of a .tar.gz of the directory")


class LaunchTensorBoardRequest(_Model):
    """``POST /api/v1/tensorboards`` (``det tensorboard start``): TensorBoard over every
    trial of ``experiment_ids`` and over ``trial_ids``, as Determined's request."""

    experiment_ids: list[Annotated[int, Field(ge=0, le=MAX_INT)]] = Field(
        default_factory=list, max_length=100)
    trial_ids: list[Annotated[int, Field(ge=0, le=MAX_INT)]] = Field(
        default_factory=list, max_length=100)
    description: str | None = Field(None, max_length=500,
                                    description="the config's `description` (the list shows it)")


class TensorBoardInfo(_Model):
    """A TensorBoard the master runs: STARTING until it serves, RUNNING (``url``, ``port``),
    TERMINATED (``exit_status`` says how)."""

    id: str
    state: Literal["STARTING", "RUNNING", "TERMINATED"]
    description: str
    experiment_ids: list[int]
    trial_ids: list[int]
    trials: list[int] = Field(description="every trial it shows")
    port: int | None
    url: str | None = Field(description="where it serves, on the master's host (RUNNING)")
    exit_status: str | None
    start_time: float
    end_time: float | None
    # its owner (issue 59): the user's id, and their current name (Determined's username)
    user_id: int | None = None
    username: str = ""


MetricGroup = Literal["training", "validation", "evaluation"]


#: A stage name (det_sdk.stages.check_stage_name)
STAGE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class MetricsRow(_Model):
    """``GET /api/v1/trials/{id}/metrics``: one stored report."""

    group: MetricGroup
    steps_completed: int
    epoch: int
    metrics: dict[str, Metric]
    #: the stage of the script (det_sdk.stages); None: the default stage
    stage: str | None = None


class MetricsReport(_Model):
    """``POST /api/v1/trials/{id}/metrics``: one group's metrics at one step.

    The master keeps one value per (trial, group, steps_completed): a report sent
    twice (a retry, or a restarted trial repeating steps) replaces, never adds.
    """

    group: MetricGroup
    steps_completed: Count
    epoch: Count = 0
    metrics: dict[MetricName, Metric] = Field(max_length=MAX_METRICS_PER_REPORT)
    #: the stage of the script that reports (det_sdk.stages; steps count from 0 in each);
    #: None: the default stage, as a report before stages
    stage: str | None = Field(default=None, pattern=STAGE_PATTERN)
    #: whether the stage is the one the searcher's length applies to: only its validation
    #: metrics are the trial's (best_metric, progress)
    searched: StrictBool = True


class StageInfo(_Model):
    """One stage of a trial's script (each ``context.fit`` is one, det_sdk.stages)."""

    name: str
    state: str  # COMPLETED once a later stage reported; else the trial's state
    searched: bool = False  # the searcher's length applied to it
    steps_completed: int = 0  # within the stage
    epoch: int = 0
    latest_checkpoint: str | None = None
    best_metric: Metric | None = None  # best searcher metric of its validations


#: The name of a Keras backend as a checkpoint report gives it (``keras.backend.backend()``:
#: tensorflow, jax, torch)
KERAS_BACKEND_PATTERN = r"^[a-z][a-z0-9_]{0,31}$"

#: A checkpoint uuid as the master accepts it: what ``uuid.uuid4()`` prints.
CHECKPOINT_UUID_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"


class CheckpointReport(_Model):
    """``POST /api/v1/checkpoints``: a checkpoint written to the trial's storage."""

    #: canonical lowercase 8-4-4-4-12 hex, as det_sdk's storage names checkpoint
    #: directories: retention deletes ``<storage>/<uuid>``, so nothing else is taken
    uuid: str = Field(pattern=CHECKPOINT_UUID_PATTERN,
                      description="the checkpoint's directory name: a canonical lowercase "
                                  "UUID (8-4-4-4-12 hex digits)")
    trial_id: Count
    steps_completed: Count
    epoch: Count
    batch: Count = 0
    size: Count = 0
    metrics: dict[MetricName, Metric] = Field(default_factory=dict,
                                              max_length=MAX_METRICS_PER_REPORT)
    stage: str | None = Field(default=None, pattern=STAGE_PATTERN)  # None: the default stage
    searched: StrictBool = True  # of the searched stage: ranks for the trial's "best"
    #: the Keras backend that trained it (det_sdk.keras's engines); None: not a Keras one
    keras_backend: str | None = Field(default=None, pattern=KERAS_BACKEND_PATTERN)


class ProgressReport(_Model):
    """``POST /api/v1/trials/{id}/progress``: fraction of the training length done."""

    progress: Number = Field(ge=0, le=1)


class JobProgressReport(_Model):
    """``POST /api/v1/allocations/{id}/progress``: a job's chief says how far it is
    (rows done of the total; ``rows_total`` null when the input's length is unknown)."""

    # strict: a row count is a JSON integer, never `true` or "5"
    rows_done: int = Field(ge=0, le=MAX_INT, strict=True)
    rows_total: int | None = Field(default=None, ge=0, le=MAX_INT, strict=True)
    output: str | None = Field(default=None, max_length=4096, strict=True,
                               description="where the job writes its output")


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
    length: int = Field(ge=1, le=MAX_INT)
    searcher_metric: Annotated[Metric, Field(description="NaN ranks last")]


class CheckpointInfo(_Model):
    uuid: str
    trial_id: int
    experiment_id: int | None = None
    steps_completed: int
    epoch: int
    batch: int = 0
    size: int = 0
    metrics: dict[str, Metric] = Field(default_factory=dict)
    created: float
    path: str | None = None
    stage: str | None = None  # None: the default stage
    #: why it failed verification on restore (never restored again); None: intact
    damaged: str | None = None
    keras_backend: str | None = None  # the Keras backend that trained it, as reported
    # its owner: its trial's experiment's (issue 59), by id and current name
    user_id: int | None = None
    username: str = ""


class RungResult(_Model):
    """A trial's searcher metric at one rung of ASHA, and whether it went on from there."""

    rung: int
    metric: Metric
    promoted: bool
    order: int  # arrival order among all rung results of the master


class SearcherLength(_Model):
    unit: Literal["epochs", "batches"]
    length: int


class TrialInfo(_Model):
    id: int
    experiment_id: int
    state: TrialState
    hparams: dict[str, JsonValue]
    seed: int
    restarts: int = 0
    steps_completed: int = 0
    epoch: int = 0
    progress: float = 0.0
    best_metric: Metric | None = None
    latest_checkpoint: str | None = None
    last_error: str | None = None
    #: what became of its checkpoints that failed verification on restore (a line each)
    checkpoint_note: str | None = None
    bracket: int = 0
    searcher_length: SearcherLength | None = None  # what the searcher has it train to now
    rungs: list[RungResult] = Field(default_factory=list)
    # QUEUED in the resource manager's own queue (a PENDING Slurm job): its reason
    queue_reason: str | None = None
    #: the stages of its script, in order (``GET /api/v1/trials/{id}`` only; a script of
    #: one fit has one, ``fit``)
    stages: list[StageInfo] | None = None
    #: the Keras backend its latest checkpoint was trained on (tensorflow, jax, torch), as
    #: the trial reported it with that checkpoint; None before one, or not Keras
    keras_backend: str | None = None


class ExperimentInfo(_Model):
    """``GET /api/v1/experiments/{id}``: the experiment with the first page of its trials
    (``trials_next_cursor`` continues at ``GET /api/v1/experiments/{id}/trials``)."""

    id: int
    name: str | None
    state: ExperimentState
    config: dict[str, JsonValue]
    created: float
    trials: list[TrialInfo] = Field(default_factory=list)
    progress: float = 0.0  # the mean of all its trials' progress
    num_trials: int = 0  # all its trials, not only those in ``trials``
    trial_states: dict[str, int] = Field(default_factory=dict)  # how many in each state
    trials_next_cursor: str | None = None
    archived: bool = False  # det experiment archive: left out of `det experiment list`
    # its owner (issue 59): the user's id, and their current name (Determined's username)
    user_id: int | None = None
    username: str = ""


class TrialPage(_Model):
    """``GET /api/v1/experiments/{id}/trials``: a page of an experiment's trials, in the
    order the searcher created them."""

    trials: list[TrialInfo]
    total: int
    next_cursor: str | None = Field(description="the next page's `cursor`; null: the last")


class ExperimentSummary(_Model):
    """One row of ``GET /api/v1/experiments``: state and counts, not every trial."""

    id: int
    name: str | None
    state: ExperimentState
    created: float
    ended: float | None = None
    searcher: str | None = None
    metric: str | None = None
    smaller_is_better: bool = True
    best_metric: Metric | None = None  # the best of its trials' best searcher metrics
    progress: float = 0.0
    num_trials: int = 0
    trial_states: dict[str, int] = Field(default_factory=dict)
    archived: bool = False  # det experiment archive: left out of `det experiment list`
    # its owner (issue 59): the user's id, and their current name (Determined's username)
    user_id: int | None = None
    username: str = ""
    # its project and that project's workspace (issue 59): `det e list --show_project`
    project_id: int = 1
    project_name: str = ""
    workspace_id: int = 1
    workspace_name: str = ""


class ExperimentPage(_Model):
    """``GET /api/v1/experiments``: the newest experiments first, ``limit`` at a time."""

    experiments: list[ExperimentSummary]
    total: int = Field(description="how many experiments the master has")
    next_cursor: str | None = Field(description="the next page's `cursor`; null: the last")


class LatestMetrics(_Model):
    """One metric group's latest report of a job (``JobInfo.latest_metrics``)."""

    steps_completed: int
    epoch: int
    metrics: dict[str, Metric]


class JobInfo(_Model):
    """``GET /api/v1/jobs/{id}``: the job with its progress (det_sdk.master.job_progress)."""

    id: int
    name: str | None
    state: JobState
    config: dict[str, JsonValue]
    created: float
    exit_code: int | None = None
    ended: float | None = None
    restarts: int = 0
    progress: float | None = Field(default=None, description="rows done / total, in [0, 1]; "
                                   "null while the total is unknown")
    rows_done: int | None = None
    rows_total: int | None = None
    rows_per_second: float | None = None
    eta_seconds: float | None = None
    output: str | None = None
    latest_metrics: dict[str, LatestMetrics] = Field(
        default_factory=dict, description="each metric group's report of the highest step "
        "(a job script's report_metrics), by group")
    # its owner (issue 59): the user's id, and their current name (Determined's username)
    user_id: int | None = None
    username: str = ""


class JobSummary(_Model):
    """One row of ``GET /api/v1/jobs``."""

    id: int
    name: str | None
    state: JobState
    created: float
    ended: float | None = None
    exit_code: int | None = None
    entrypoint: str | None = None
    slots: int | None = None
    progress: float | None = None
    # its owner (issue 59): the user's id, and their current name (Determined's username)
    user_id: int | None = None
    username: str = ""


class JobPage(_Model):
    """``GET /api/v1/jobs``: the newest jobs first, ``limit`` at a time."""

    jobs: list[JobSummary]
    total: int
    next_cursor: str | None = Field(description="the next page's `cursor`; null: the last")


class CheckpointPage(_Model):
    """``GET /api/v1/checkpoints``: the newest checkpoints (of a trial) first."""

    checkpoints: list[CheckpointInfo]
    total: int
    next_cursor: str | None = Field(description="the next page's `cursor`; null: the last")


class AllocationInfo(_Model):
    id: str
    task_type: Literal["TRIAL", "GENERIC"]
    trial_id: int | None = None
    job_id: int | None = None
    state: AllocationState


class ErrorBody(_Model):
    """Every error answer: ``detail`` says what is wrong, naming the field if there is one."""

    detail: Any
