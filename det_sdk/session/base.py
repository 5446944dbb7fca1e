"""The session seam's interface: what a training process reports to whatever keeps its
records, and what it asks of it (det_sdk.session.local, det_sdk.session.master)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from det_sdk.config import Length
from det_sdk.errors import DetSdkError
from det_sdk.stages import DEFAULT_STAGE
from det_sdk.storage import CheckpointStorage

__all__ = ["DEFAULT_RUNS_DIR", "MetricGroup", "RunNotFoundError", "Session"]

MetricGroup = Literal["training", "validation", "evaluation"]
DEFAULT_RUNS_DIR = "det-runs"


class RunNotFoundError(DetSdkError, LookupError):
    """No local run with that id (or no run at all, for ``resume="latest"``)."""


class Session:
    """Records of one trial/run: metrics, checkpoints, and the outside's instructions."""

    trial_id: int | str | None
    storage: CheckpointStorage
    latest_checkpoint: str | None
    tensorboard_dir: Path | None
    # Where relative paths of the files callbacks write are kept (None: as given, in the
    # working directory). On the cluster, a folder of the trial's in checkpoint storage.
    files_dir: Path | None = None
    # the profiler's sampler (det_sdk.profiler.SystemSampler) while one runs: the
    # session's close stops it first, so its last report goes out with the others
    profiler: Any = None

    # The reports below take the stage they belong to (det_sdk.stages) as arguments:
    # ``stage`` names it (the default stage's records carry no stage field) and
    # ``searched`` says whether the searcher's length applies to it.

    def report_metrics(
        self, group: MetricGroup, steps_completed: int, epoch: int, metrics: Mapping[str, float],
        *, stage: str = DEFAULT_STAGE, searched: bool = True,
    ) -> None:
        raise NotImplementedError

    def report_checkpoint(self, uuid: str, metadata: Mapping[str, Any], *,
                          stage: str = DEFAULT_STAGE, searched: bool = True) -> None:
        raise NotImplementedError

    def checkpoint_for_trial(self, trial_id: int | str, best: bool = False,
                             stage: str | None = None) -> str:
        """UUID of a trial's latest (or best, by the searcher metric) checkpoint; of
        ``stage`` (det_sdk.stages) when given."""
        raise NotImplementedError

    def checkpoint_path(self, uuid: str) -> Path:
        """Local directory holding checkpoint ``uuid`` (downloaded if need be)."""
        raise NotImplementedError

    def stage_checkpoints(self) -> list[dict[str, Any]]:
        """This trial's checkpoint records oldest first (``uuid``, ``stage`` but for the
        default stage), those a resume can use: which stages it reached, and where."""
        return [{"uuid": self.latest_checkpoint}] if self.latest_checkpoint else []

    def training_length(self) -> Length | None:
        """How long to train when told by the outside; ``None``: as the script says."""
        return None

    def complete_operation(self, length: Length, searcher_metric: float | None) -> Length | None:
        """Training reached ``length`` (from :meth:`training_length`) and was validated.

        Returns the next length to train to, or None: stop. Off the cluster there is
        one length only.
        """
        return None

    def should_preempt(self) -> bool:
        """True when the outside asks this process to checkpoint and stop."""
        return False

    def report_progress(self, fraction: float, *, searched: bool = True) -> None:
        """Fraction of the training length done, for progress displays (a trial's progress
        is its ``searched`` stage's; the other stages' is not reported)."""

    def report_rows(self, rows_done: int, rows_total: int | None,
                    output: str | None = None) -> None:
        """A batch job's progress: rows done of ``rows_total`` (None: unknown), and
        where its output goes. Kept by the master for a generic job (``det job
        describe``); nothing elsewhere."""

    def acknowledge_preemption(self) -> None:
        """Tell the outside that this process stops because it was asked to (so its exit
        is a stop to resume, not the end of training). Nothing off the cluster."""

    def alert(self, title: str, description: str, level: str) -> None:
        """A script's custom alert (Determined's ``core_context.alert``; ``level``: DEBUG,
        INFO, WARNING or ERROR). Off the cluster there are no webhooks: it is logged."""
        import logging

        logging.getLogger("det_sdk.session").log(
            getattr(logging, level, logging.INFO), "alert (no webhooks off the cluster): "
            "%s: %s", title, description)
    def report_system_metrics(self, records: list[dict[str, Any]]) -> None:
        """The profiler's records (det_sdk.profiler): ``group``, ``time``, ``metrics``
        (``{host: {...}}``) and maybe ``steps_completed``. Kept where the session keeps
        its records; never raises into the sampler, never blocks it."""

    def stop_profiler(self) -> None:
        """Stop the profiler (its last sample reported) before the session closes."""
        profiler, self.profiler = self.profiler, None
        if profiler is not None:
            profiler.stop()

    def close(self) -> None:
        """Deliver what is pending and release resources."""

    def resume_hint(self) -> str:
        """How a user continues this trial after it stopped (shown when it stops)."""
        return ""
