"""Reporting metrics and progress: the core API's ``core_context.train``.

>>> from det_sdk.distributed import SingleProcess
>>> class Rec:
...     def __init__(self): self.rows = []
...     def report_metrics(self, group, steps_completed, epoch, metrics, **stage):
...         self.rows.append((group, steps_completed, epoch, dict(metrics)))
...     def report_progress(self, fraction, **stage): self.rows.append(("progress", fraction))
>>> train = TrainContext(Rec(), SingleProcess())
>>> train.report_training_metrics(steps_completed=10, metrics={"loss": 0.5}, epoch=1)
>>> train._session.rows
[('training', 10, 1, {'loss': 0.5})]
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, cast

from det_sdk.distributed import Processes
from det_sdk.errors import ArgumentTypeError, UsageError
from det_sdk.session import MetricGroup, Session
from det_sdk.stages import DEFAULT_STAGE

__all__ = ["TrainContext"]

log = logging.getLogger("det_sdk.core")


class TrainContext:
    """Training and validation metrics and progress, through the session (local run or master).

    Only the chief's reports are kept (one record per trial); on the other
    processes these calls do nothing, so the same script runs on every rank::

        core_context.train.report_training_metrics(steps_completed=100, metrics={"loss": 0.3})
        core_context.train.report_validation_metrics(steps_completed=100,
                                                     metrics={"val_loss": 0.4})
    """

    def __init__(self, session: Session, distributed: Processes) -> None:
        self._session = session
        self._dist = distributed
        self._epoch = 0

    def report_metrics(self, group: str, steps_completed: int, metrics: Mapping[str, Any],
                       epoch: int | None = None, *, stage: str = DEFAULT_STAGE,
                       searched: bool = True) -> None:
        """Report ``metrics`` of ``group`` (``training``, ``validation`` or
        ``evaluation``) at ``steps_completed`` batches; ``epoch`` defaults to the last
        one reported.

        ``stage`` and ``searched`` are a det_sdk extension: the stage (det_sdk.stages, one
        ``context.fit`` of a script) the metrics belong to, and whether the searcher's
        length applies to it; a script of Determined's shape leaves them out (the
        default stage, searched)."""
        if group not in ("training", "validation", "evaluation"):
            raise UsageError("report_metrics: group must be 'training', 'validation' or "
                             f"'evaluation', got {group!r}")
        if isinstance(steps_completed, bool) or not isinstance(steps_completed, int) \
                or steps_completed < 0:
            raise UsageError("report_metrics: steps_completed must be an int >= 0, got "
                             f"{steps_completed!r}")
        if not isinstance(metrics, Mapping):
            raise ArgumentTypeError("report_metrics: metrics must be a mapping of names to "
                                    f"numbers, got {type(metrics).__name__}")
        if epoch is not None:
            self._epoch = int(epoch)
        if self._dist.is_chief:
            # group: a str checked above to be one of the MetricGroup literals
            self._session.report_metrics(cast(MetricGroup, group), steps_completed,
                                         self._epoch, metrics, stage=stage, searched=searched)

    def report_training_metrics(self, steps_completed: int, metrics: Mapping[str, Any],
                                epoch: int | None = None) -> None:
        """Training metrics at ``steps_completed`` batches."""
        self.report_metrics("training", steps_completed, metrics, epoch)

    def report_validation_metrics(self, steps_completed: int, metrics: Mapping[str, Any],
                                  epoch: int | None = None) -> None:
        """Validation metrics at ``steps_completed`` batches (the searcher reads these)."""
        self.report_metrics("validation", steps_completed, metrics, epoch)

    def report_progress(self, progress: float, *, searched: bool = True) -> None:
        """Fraction of the training length done (0..1), for ``det experiment describe``.

        ``searched`` is a det_sdk extension: False for a stage the searcher's length does
        not apply to (det_sdk.stages), whose progress is not the trial's."""
        if self._dist.is_chief:
            self._session.report_progress(float(progress), searched=searched)

    def report_rows(self, rows_done: int, rows_total: int | None,
                    output: str | None = None) -> None:
        """det_sdk extension: a batch job's progress, ``rows_done`` of ``rows_total``
        (None: unknown) and where its output goes; the master keeps it for a job
        (``det job describe``), nothing else does. The chief's call counts."""
        if self._dist.is_chief:
            self._session.report_rows(rows_done, rows_total, output)

    def set_status(self, status: str) -> None:
        """Determined shows this in its UI; det_sdk logs it (debug)."""
        log.debug("det_sdk: status: %s", status)
