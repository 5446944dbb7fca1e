"""Where training is: the adapter that tells the :class:`FitRun` what Keras did, and
the planned end of a ``model.fit`` call."""

from __future__ import annotations

from typing import Any

from det_sdk.keras._callbacks._base import DetCallback
from det_sdk.keras._fit_run import FitRun

__all__ = ["StopAt", "TrackPosition"]


class TrackPosition(DetCallback):
    """Tell ``run`` where Keras is: each call's begin, epoch begins, batch and epoch
    ends (the first epoch of a call may start at ``run.batch``). First in the order:
    every other hook reads the position it moves.

    >>> cb = TrackPosition(FitRun(None, None, checkpoints=False))
    """

    def __init__(self, run: FitRun) -> None:
        super().__init__()
        self.run = run

    def on_train_begin(self, logs: Any = None) -> None:
        self.run.call_begins()

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.run.epoch_begins(epoch)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
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
