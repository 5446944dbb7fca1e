"""Where training is: the adapter that tells the :class:`FitRun` what Keras did, the
planned end of a ``model.fit`` call, and the epoch as callbacks see it when a call
starts in the middle of one (:class:`ResumedEpoch`)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from det_sdk.keras import _compat
from det_sdk.keras._callbacks._base import DetCallback
from det_sdk.keras._fit_run import FitRun

__all__ = ["ResumedEpoch", "StopAt", "TrackPosition"]

log = logging.getLogger("det_sdk.keras")


class TrackPosition(DetCallback):
    """Tell ``run`` where Keras is: epoch begins, batch and epoch ends (the first epoch
    of a call may continue at ``run.batch``). First in the order: every other hook
    reads the position it moves.

    >>> cb = TrackPosition(FitRun(None, None, checkpoints=False))
    """

    def __init__(self, run: FitRun) -> None:
        super().__init__()
        self.run = run
        # the profiler's per-batch timer (det_sdk.profiler): Keras fetches a batch inside
        # its step, so a step's time here includes its data's wait
        self._timer = run.loop.core.batch_timer if run.loop is not None else None

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.run.epoch_begins(epoch)

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        if self._timer is not None:
            self._timer.batch_start()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self._timer is not None:
            self._timer.step_end()
        self.run.batch_ends(batch)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.run.epoch_ends(epoch, self.params.get("steps") if self.params else None)


class StopAt(DetCallback):
    """End the ``model.fit`` call once ``run`` reaches ``(epoch, batch)``.

    Keras then ends the epoch early as usual, validation included.

    >>> cb = StopAt(FitRun(None, None, checkpoints=False), (2, 5))
    """

    def __init__(self, run: FitRun, at: tuple[int, int]) -> None:
        super().__init__()
        self.run = run
        self.at = at

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self.run.reached(self.at):
            self.model.stop_training = True
            self.run.hold_epoch_metrics()  # before the validation that follows resets them


class ResumedEpoch(_compat.keras.callbacks.CallbackList):
    """The callbacks of a ``model.fit`` call that starts at batch ``start`` of epoch
    ``epoch`` (a resume, or the rest of an epoch after a mid-epoch validation), as
    Keras's own list, showing them that epoch as an uninterrupted run shows it:
    ``params["steps"]`` the epoch's ``steps``, batch indices from ``start`` on (Keras
    counts the call's steps from 0). Every callback sees it: Keras's (progress bar,
    History), det_sdk's and the script's (a per-batch learning-rate warmup reads the
    index). ``model.fit`` takes a ``CallbackList`` as it is.

    >>> cbs = ResumedEpoch([], model=None, epoch=2, start=5, steps=10, epochs=3, verbose=0)
    >>> cbs.params["steps"], cbs.shown(3), cbs.shown(4)
    (10, 3, 4)
    >>> cbs.on_epoch_begin(2); cbs.shown(0)
    5
    """

    def __init__(self, callbacks: list[Any], *, model: Any, epoch: int, start: int,
                 steps: int, epochs: int, verbose: Any = "auto",
                 carried: list[np.ndarray] | None = None) -> None:
        verbose = 1 if verbose == "auto" else verbose  # as both Kerases' fit resolve it
        super().__init__(callbacks, add_history=True, add_progbar=verbose != 0, model=model,
                         verbose=verbose, epochs=epochs, steps=steps)
        self._resumed, self._start, self._current = epoch, start, -1
        # The metrics' state where the epoch was left (FitRun.epoch_metrics), put back
        # as it continues: its training averages are then the whole epoch's
        self._carried = carried

    def shown(self, batch: int) -> int:
        """The index callbacks see for the call's ``batch``."""
        return batch + self._start if self._current == self._resumed else batch

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self._current = epoch
        super().on_epoch_begin(epoch, logs)

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        carried = self._carried if self._current == self._resumed else None
        if carried is not None:
            variables = _compat.metric_variables(self.model)
            if len(variables) == len(carried):  # built: the state back before the step
                for var, value in zip(variables, carried):
                    var.assign(value)
                self._carried = None
        super().on_train_batch_begin(self.shown(batch), logs)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        carried = self._carried if self._current == self._resumed else None
        if carried is not None:
            # Keras built its compiled metrics in this first step: every built-in
            # metric's state adds up over disjoint batches (totals, counts, confusion
            # cells), so the epoch's state is the held one plus this step's (a + b is
            # b + a exactly: bit-equal to the uninterrupted sums)
            self._carried = None
            variables = _compat.metric_variables(self.model)
            if len(variables) == len(carried):
                for var, value in zip(variables, carried):
                    var.assign(var.numpy() + value)
                results = _compat.metric_results(self.model)
                logs = {**(logs or {}), **{k: results[k] for k in (logs or {}) if k in results}}
            else:
                log.warning("det_sdk: the epoch's training metrics could not be continued "
                            "(%d state variables held, the model has %d): epoch %d's "
                            "training averages cover the batches after the resume",
                            len(carried), len(variables), self._resumed + 1)
        super().on_train_batch_end(self.shown(batch), logs)
