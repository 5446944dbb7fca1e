"""When to checkpoint and when to stop: adapters that ask the :class:`FitRun` to save
at a period's end, or to stop (and save) when the processes agree to."""

from __future__ import annotations

from typing import Any

from det_sdk.config import Length
from det_sdk.engine.stopping import StopAgreement
from det_sdk.keras._callbacks._base import DetCallback
from det_sdk.keras._fit_run import FitRun

__all__ = ["BatchPeriodCheckpoint", "PeriodicCheckpoint", "StopOnSignal",
           "last_batch_of_epoch", "periodic_checkpoint"]


class PeriodicCheckpoint(DetCallback):
    """Save a checkpoint every ``period`` epochs through ``run.save()`` (see
    :func:`periodic_checkpoint` for a period in batches).

    >>> cb = PeriodicCheckpoint(Length(epochs=1), FitRun(None, None, checkpoints=False))
    """

    def __init__(self, period: Length, run: FitRun) -> None:
        super().__init__()
        self.period = period
        self.run = run

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        # the run's position (moved by TrackPosition before us) says whether the epoch is
        # complete
        run = self.run
        done = run.batch == 0 and run.epoch == epoch + 1
        if self.period.epochs and done and run.epoch % self.period.epochs == 0:
            run.save()


def last_batch_of_epoch(callback: Any, batch: int) -> bool:
    """Whether ``batch`` (this ``model.fit`` call's index) ends its epoch.

    Nothing stops or checkpoints between an epoch's last batch and the epoch's end:
    Keras validates and calls every ``on_epoch_end`` (History, EarlyStopping,
    ReduceLROnPlateau, ModelCheckpoint, det_sdk's records) after it, and a checkpoint
    taken before them would resume past an epoch whose end never happened. Such a
    stop or save is taken at the epoch's end instead. Unknown when Keras does not know
    the epoch's length (a dataset of unknown cardinality): False.
    """
    steps = callback.params.get("steps") if callback.params else None
    return steps is not None and batch + 1 >= steps


class BatchPeriodCheckpoint(PeriodicCheckpoint):
    """Save a checkpoint every ``period.batches`` batches (a hook on every batch, which
    an epoch period does without). A save due at an epoch's last batch is taken at
    that epoch's end (:func:`last_batch_of_epoch`).

    >>> cb = BatchPeriodCheckpoint(Length(batches=50), FitRun(None, None, checkpoints=False))
    """

    def __init__(self, period: Length, run: FitRun) -> None:
        super().__init__(period, run)
        self._due_at_epoch_end = False

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self.run.steps_completed % self.period.value == 0:  # value: the batches
            if last_batch_of_epoch(self, batch):
                self._due_at_epoch_end = True
            else:
                self.run.save()

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if self._due_at_epoch_end:
            self._due_at_epoch_end = False
            self.run.save()


def periodic_checkpoint(period: Length, run: FitRun) -> PeriodicCheckpoint:
    """The checkpoint callback for ``period``: per epochs, or per batches.

    >>> run = FitRun(None, None, checkpoints=False)
    >>> type(periodic_checkpoint(Length(batches=5), run)).__name__
    'BatchPeriodCheckpoint'
    """
    cls = BatchPeriodCheckpoint if period.batches else PeriodicCheckpoint
    return cls(period, run)


class StopOnSignal(DetCallback):
    """After the current batch, checkpoint and leave ``fit`` when asked to stop.

    ``agreement``: the processes' decision (:class:`det_sdk.engine.stopping.
    StopAgreement`: a signal, the master's request; with several processes a
    collective, so that all stop at the same batch and take the checkpoint, itself
    collective, together), asked every ``every`` batches and at each epoch end. The
    stop (:class:`det_sdk.keras._fit_run.Preempted`, its checkpoint saved by
    ``run.stop``) is raised out of ``model.fit``.

    >>> from det_sdk.distributed import SingleProcess
    >>> class Master:
    ...     def requested(self): return False
    >>> agreement = StopAgreement(SingleProcess(), Master(), lambda: None)
    >>> cb = StopOnSignal(agreement, FitRun(None, None, checkpoints=False))
    """

    def __init__(self, agreement: StopAgreement, run: FitRun, every: int = 1) -> None:
        super().__init__()
        self.agreement = agreement
        self.run = run
        self.every = every
        self._batches = 0

    def _check(self) -> None:
        stop = self.run.stop(self.agreement)
        if stop is not None:
            raise stop

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self._batches += 1
        if self._batches % self.every == 0 and not last_batch_of_epoch(self, batch):
            self._check()

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self._check()
