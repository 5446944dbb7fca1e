"""One fit's state and decisions, in one object: :class:`FitRun`.

Where training is (epoch, batch, steps completed), the run's History, the last
validation; when a checkpoint is taken, whether to stop, when a searcher operation is
complete. ``context.fit`` drives a FitRun with the ``model.fit`` calls it plans
(``_fit.py``); ``DeterminedCallback`` drives one from inside the script's own
``model.fit``, at its epoch ends. The Keras callbacks (``_callbacks/``) are thin
adapters: they tell the FitRun what Keras did (a batch ended, an epoch ended, a
validation) and ask it what to do. Nothing else holds the position: it is read here,
as a value (:class:`det_sdk.engine.position.Position` is frozen).

>>> run = FitRun(None, None, checkpoints=False)  # a loop and a model in real use
>>> run.epoch_begins(0); run.batch_ends(0); run.batch_ends(1)
>>> run.position
Position(epoch=0, batch=2, steps_completed=2)
>>> run.epoch_ends(0, steps=2); run.position.as_dict()
{'epoch': 1, 'batch': 0, 'steps_completed': 2}
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from det_sdk.config import Length
from det_sdk.engine.position import Position
from det_sdk.engine.stopping import StopAgreement
from det_sdk.keras import _callback_state, _compat
from det_sdk.stages import DEFAULT_STAGE, record_fields

if TYPE_CHECKING:
    from det_sdk.keras._fit_inputs import PipelinePosition
    from det_sdk.keras._loop import TrainingLoop

__all__ = ["FitRun", "Preempted", "history_from"]


class Preempted(Exception):
    """Raised out of ``model.fit`` once a checkpoint is saved after a stop request.

    Control flow, not an error, and so the one exception class of det_sdk outside
    :class:`det_sdk.errors.DetSdkError` (tests/e2e/test_errors.py lists it): it carries a
    preemption that went right (checkpoint saved) from a callback out through Keras's
    ``fit`` to ``context.fit``, which catches it. In the error tree, a handler written
    ``except DetSdkError`` (a user's, or the ``det`` CLI's) would take a clean stop for a
    failure.
    """

    def __init__(self, reason: str, uuid: str | None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.uuid = uuid


def history_from(past: Mapping[str, Any] | None) -> Any:
    """A Keras History holding what a checkpoint's ``past`` recorded (empty: a fresh one).

    >>> history_from({"history": {"loss": [0.5]}, "epoch": [0]}).history
    {'loss': [0.5]}
    """
    history = _compat.keras.callbacks.History()
    past = past or {}
    history.history = {k: list(v) for k, v in (past.get("history") or {}).items()}
    history.epoch = list(past.get("epoch") or [])
    history.params = {}
    return history


class FitRun:
    """One fit: its position, History and last validation, and its save / stop /
    searcher decisions.

    - ``loop``, ``model``: the training loop (checkpoints, the searcher) and the model.
    - ``start``: where it starts (a checkpoint's position, or ``initial_epoch``).
    - ``past``: what the checkpoint it resumes from recorded (History), or None.
    - ``checkpoints``: whether this fit takes checkpoints at all (``context.fit`` with no
      checkpoint period takes none; a stop then saves nothing).
    - ``saved``: ``start`` is a checkpoint's position: saving there again is skipped.
    - ``last_validation``: the validation the resumed checkpoint recorded.
    - ``callback_states``, ``stage``, ``searched``, ``extra``: what each checkpoint's
      metadata holds besides the position (the user's callbacks' state, the stage,
      ``DeterminedCallback``'s continue id).
    """

    def __init__(
        self, loop: TrainingLoop, model: Any, *, checkpoints: bool,
        start: Position | None = None, past: Mapping[str, Any] | None = None,
        saved: bool = False, last_validation: Mapping[str, float] | None = None,
        callback_states: _callback_state.CallbackStates | None = None, stage: str | None = None,
        searched: bool = True, extra: Mapping[str, Any] | None = None,
    ) -> None:
        self.loop, self.model = loop, model
        start = start or Position(0, 0, 0)
        # The position's only copy. Written by the methods under "what Keras did" alone.
        self._epoch, self._batch, self._steps = start.epoch, start.batch, start.steps_completed
        self.history = history_from(past)  # the whole run's: what fit returns
        self._validation = dict(last_validation or {})
        self._validation_steps: int | None = None
        #: validations the run made (its resumed part and before): each read the
        #: validation data anew, and a reshuffling dataset drew a new order for it
        self.validation_passes = int((past or {}).get("validation_passes", 0))
        self._checkpoints = checkpoints
        self._states, self._stage, self._searched = callback_states, stage, searched
        self._extra = dict(extra or {})
        self._saved: tuple[int, str | None] | None = (self._steps, None) if saved else None
        #: the training pipeline's position (a ``tf.data`` dataset's), saved with each
        #: checkpoint; None for det_sdk's own pipelines, addressed by (epoch, batch)
        self.pipeline: PipelinePosition | None = None
        # This process's training metrics' state in the epoch under way, held where a
        # model.fit call leaves the epoch (before its validation resets the metrics), or
        # read from the checkpoint a resume starts from: (steps completed then, arrays)
        self._epoch_metrics: tuple[int, list[np.ndarray]] | None = None

    # --- where training is ---------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The epoch under way (the next one after an epoch's end)."""
        return self._epoch

    @property
    def batch(self) -> int:
        """Batches done in :attr:`epoch`."""
        return self._batch

    @property
    def steps_completed(self) -> int:
        """Batches trained since the run began (those before a resume included)."""
        return self._steps

    @property
    def position(self) -> Position:
        """Where training is, as a value (checkpoints record it)."""
        return Position(self._epoch, self._batch, self._steps)

    def reached(self, at: tuple[int, int] | None) -> bool:
        """Whether training is at or past ``(epoch, batch)`` (None: never)."""
        return at is not None and (self._epoch, self._batch) >= at

    # --- what Keras did (``TrackPosition`` tells) -----------------------------------------

    def epoch_begins(self, epoch: int) -> None:
        """Keras begins ``epoch``; a ``model.fit`` call that continues the current epoch
        (it starts mid-epoch) keeps the batches already done."""
        if epoch != self._epoch:
            self._epoch, self._batch = epoch, 0

    def batch_ends(self, batch: int) -> None:
        """Keras ended ``batch``: its index in the epoch (a call that starts mid-epoch
        shows callbacks the uninterrupted epoch's indices, ``callbacks.ResumedEpoch``)."""
        done = batch + 1  # steps_per_execution may skip indices
        self._steps += done - self._batch
        self._batch = done

    def epoch_ends(self, epoch: int, steps: int | None) -> None:
        """Keras ended ``epoch`` of ``steps`` batches (None: unknown). An epoch that
        ended early (``stop_training`` inside it, as ``StopAt`` does) stays the current
        one, so the next call continues it."""
        if steps is not None and self._batch < steps:
            return  # stopped inside the epoch: the rest is still to come
        self._epoch, self._batch = epoch + 1, 0

    # --- the epoch's training metrics across model.fit calls --------------------------------
    #
    # Keras resets the metrics as each model.fit call begins an epoch, so a call that
    # continues an epoch (a resume, or the rest after a mid-epoch validation) would log
    # the averages of its own batches alone. Their state (totals and counts) is held where
    # an epoch is left, saved with a mid-epoch checkpoint (each process's), and put back
    # as the next call continues the epoch (``callbacks.ResumedEpoch``).

    def hold_epoch_metrics(self) -> None:
        """Hold the metrics' state now, at the end of a training batch: a call leaves the
        epoch here (its validation, which comes next, resets them)."""
        if self._batch > 0:
            self._epoch_metrics = (self._steps, _metric_state(self.model))

    def continue_epoch_metrics(self, arrays: list[np.ndarray] | None) -> None:
        """The state a resumed checkpoint saved for this position's epoch."""
        self._epoch_metrics = (self._steps, list(arrays)) if arrays else None

    def epoch_metrics(self) -> list[np.ndarray] | None:
        """The state of the epoch under way as it was left at this position, if held."""
        held = self._epoch_metrics
        return held[1] if held is not None and held[0] == self._steps and self._batch else None

    def _metric_arrays(self) -> list[tuple[str, str, Any]]:
        """Every process's metric state in the epoch under way, as a mid-epoch checkpoint's
        ``metrics:<rank>`` arrays (a collective with several processes); none at an
        epoch's start."""
        if not self._batch:
            return []
        mine = self.epoch_metrics()
        if mine is None:  # a save at a batch's end: the metrics hold the epoch's state
            mine = _metric_state(self.model)
        dist = self.loop.distributed
        every = dist.allgather(mine) if dist.size > 1 else [mine]
        return [(f"metrics:{rank}", str(i), a)
                for rank, arrays in enumerate(every) for i, a in enumerate(arrays)]

    # --- records -------------------------------------------------------------------------

    def record_epoch(self, epoch: int, logs: Mapping[str, Any] | None) -> None:
        """Append an epoch end's logs to the run's History."""
        self.history.epoch.append(epoch)
        for k, v in (logs or {}).items():
            try:
                value = float(v)
            except (TypeError, ValueError):
                continue  # not a number (a custom step's tensor of several values)
            self.history.history.setdefault(k, []).append(value)

    def validated(self, metrics: Mapping[str, float]) -> None:
        """A validation at the current position (``val_`` names)."""
        self._validation, self._validation_steps = dict(metrics), self._steps
        self.validation_passes += 1

    @property
    def last_validation(self) -> dict[str, float]:
        """The latest validation's metrics (a resumed checkpoint's, before any)."""
        return self._validation

    @property
    def validated_here(self) -> bool:
        """Whether the latest validation was taken at the current position."""
        return self._validation_steps == self._steps

    # --- decisions -----------------------------------------------------------------------

    def save(self) -> str | None:
        """The checkpoint of this position (its uuid); the same one if it was taken.

        Adds the run's History, the user's callbacks' state and the stage to the
        metadata and goes down to :meth:`TrainingLoop.save`. None when this fit takes
        no checkpoints."""
        if not self._checkpoints:
            return None
        if self._saved is None or self._saved[0] != self._steps:
            record = {"epoch": list(self.history.epoch), "history": self.history.history,
                      "validation_passes": self.validation_passes}
            extra: dict[str, Any] = dict(self._extra)
            if self._states is not None and self.loop.distributed.is_chief:
                extra[_callback_state.METADATA_KEY] = self._states.collect()
            if self._stage is not None:
                extra.update(record_fields(self._stage))
            arrays = self._pipeline_arrays(extra) + self._metric_arrays()
            began = time.perf_counter()
            uuid = self.loop.save(self.model, self.position, self._validation, history=record,
                                  extra=extra or None, stage=self._stage or DEFAULT_STAGE,
                                  searched=self._searched, arrays=arrays)
            timer = self.loop.core.batch_timer  # the profiler's: training waited this long
            if timer is not None:
                timer.checkpoint_blocked(time.perf_counter() - began)
            self._saved = (self._steps, uuid)
        return self._saved[1]

    def state_changed(self) -> None:
        """The model changed without training (Keras's end of fit overwrote the weights by
        their averages): the next :meth:`save` writes a checkpoint even at a position
        already saved."""
        self._saved = None

    def _pipeline_arrays(self, extra: dict[str, Any]) -> list[tuple[str, str, Any]]:
        """Every process's pipeline state as the checkpoint's ``pipeline:<rank>`` arrays
        (a collective with several processes), its metadata into ``extra``."""
        if self.pipeline is None:
            return []
        states, extra["pipeline"] = self.pipeline.checkpoint(self._steps)
        dist = self.loop.distributed
        every = dist.allgather(states) if dist.size > 1 else [states]
        # [now, as its pass began] per rank; an empty array stands for None
        return [(f"pipeline:{rank}", name, np.frombuffer(s or b"", np.uint8))
                for rank, mine in enumerate(every)
                for name, s in zip(("iterator", "pass_start"), mine)]

    def stop(self, agreement: StopAgreement) -> Preempted | None:
        """Whether the processes agree to stop here (a collective on N): the stop, its
        checkpoint saved, or None to go on."""
        reason = agreement.decide()
        return Preempted(reason, self.save()) if reason else None

    def complete(self, operation: Length, metrics: Mapping[str, Any], *, among: str,
                 hint: str) -> Length | None:
        """The searcher's ``operation`` is trained: checkpoint it (so a trial the searcher
        stops keeps it, and a promoted one that crashes resumes from here), report
        ``metrics``' searcher metric, and return the next length, or None: stop."""
        if self._checkpoints:
            self.save()
            self.loop.wait_for_checkpoints()  # on disk and reported before the searcher decides
        return self.loop.searcher.complete_from(operation, metrics,
                                                self.loop.policy.searcher_metric,
                                                among=among, hint=hint)


def _metric_state(model: Any) -> list[np.ndarray]:
    return [np.array(v.numpy()) for v in _compat.metric_variables(model)]
