"""A fit's checkpoint, once per position: what the callbacks that decide to save call.

The decision (an epoch's end, a batch period, a stop, the searcher's length) is taken in
``_callbacks`` and ``_fit``; the save goes down from here to ``TrainingLoop.save``, the
writer thread and storage.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from det_sdk.engine.position import Position
from det_sdk.keras import _callback_state
from det_sdk.keras._callbacks import MetricsReporter
from det_sdk.keras._loop import TrainingLoop
from det_sdk.stages import DEFAULT_STAGE, record_fields

__all__ = ["Saver"]


class Saver:
    """Save a checkpoint at the current position, once per position.

    What a fit's ``PeriodicCheckpoint``, ``StopOnSignal`` and searcher step call to
    checkpoint: it adds the run's History, the user's callbacks' state and the stage to
    the metadata and goes down to :meth:`TrainingLoop.save`. ``DeterminedCallback``
    saves through it too (``extra``: its continue id; ``saved_at``: the position of the
    checkpoint it resumed from, which is not saved again). Example::

        save = Saver(loop, model, position, reporter, history)
        save()  # the new checkpoint's uuid
        save()  # the same uuid: nothing trained since
    """

    def __init__(self, loop: TrainingLoop, model: Any, position: Position,
                 reporter: MetricsReporter, history: Any,
                 callback_states: _callback_state.CallbackStates | None = None,
                 stage: str | None = None, *, searched: bool = True,
                 extra: Mapping[str, Any] | None = None,
                 saved_at: int | None = None) -> None:
        self.loop, self.model, self.position, self.reporter = loop, model, position, reporter
        self.history = history
        self.callback_states = callback_states
        self.stage = stage  # recorded in the metadata, but for the default stage
        self.searched = searched  # and reported with the checkpoint, as its stage's
        self.extra = dict(extra or {})
        self._last: tuple[int, str | None] | None = \
            None if saved_at is None else (saved_at, None)

    def __call__(self) -> str | None:
        """The checkpoint of this position (its uuid); the same one if it was taken."""
        if self._last is None or self._last[0] != self.position.steps_completed:
            record = {"epoch": list(self.history.epoch), "history": self.history.history}
            extra: dict[str, Any] | None = dict(self.extra) or None
            if self.callback_states is not None and self.loop.distributed.is_chief:
                extra = {**(extra or {}),
                         _callback_state.METADATA_KEY: self.callback_states.collect()}
            if self.stage is not None and record_fields(self.stage):
                extra = {**(extra or {}), **record_fields(self.stage)}
            uuid = self.loop.save(self.model, self.position, self.reporter.last_validation,
                                  history=record, extra=extra,
                                  stage=self.stage or DEFAULT_STAGE, searched=self.searched)
            self._last = (self.position.steps_completed, uuid)
        return self._last[1]
