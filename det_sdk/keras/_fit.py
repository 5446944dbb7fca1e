"""``context.fit``: Keras's ``model.fit`` with resumption and records.

One call trains from where the run's latest checkpoint left off to the end of the
training length: the script's ``epochs`` off the cluster; on it, the searcher's
operations one after another ("train to length L, validate, report the searcher
metric", then continue or stop as the searcher says). ``_plan.plan_calls`` cuts
each stretch into ``model.fit`` calls that start and end where needed (mid-epoch
resumption, mid-epoch validation).

What the fit is at, and every save, stop and searcher decision, is one
:class:`det_sdk.keras._fit_run.FitRun`; this module plans the ``model.fit`` calls that
drive it (:class:`PlannedFit`) and puts det_sdk's callbacks, thin adapters to the
FitRun, around the script's.

``run_fit`` never exits the process: it returns a :class:`FitOutcome` that says
whether training was stopped (a signal, the master's preemption) and where; the
context decides what a stop means for the script.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf

from det_sdk.config import Length
from det_sdk.engine.position import Position
from det_sdk.engine.signals import catch_stop_signals
from det_sdk.engine.stopping import StopAgreement
from det_sdk.errors import ArgumentTypeError, StateError, UsageError
from det_sdk.keras import _callback_state, _checkpoint, _compat, _inputs
from det_sdk.keras._callbacks import (
    AggregateMetrics,
    AverageMovingStatistics,
    AverageStepOutputs,
    CheckInSync,
    MetricsReporter,
    RecordHistory,
    ResumedEpoch,
    SequenceEpochEnd,
    StopAt,
    StopOnSignal,
    TensorBoardScalars,
    TrackPosition,
    UndoPaddingMetrics,
    WarnUnsavedRandomness,
    chief_only_callbacks,
    periodic_checkpoint,
)
from det_sdk.keras._fit_inputs import FitInputs, PipelinePosition, Validation, fit_inputs
from det_sdk.keras._fit_run import FitRun, Preempted
from det_sdk.keras._loop import BROADCAST_MISSED, TrainingLoop
from det_sdk.keras._plan import FitCall, plan_calls
from det_sdk.stages import Stage, StageMismatchError

__all__ = ["FitOutcome", "PlannedFit", "callbacks_in_order", "run_fit"]

log = logging.getLogger("det_sdk.keras")

# With several processes, how often (in batches) they agree whether to stop: a
# collective per batch would cost more than small batches take.
STOP_CHECK_EVERY = 10

Callback = Any  # keras.callbacks.Callback of the running Keras


@dataclass
class FitOutcome:
    """What ``run_fit`` did: the History, the stop that ended it early, if any, and
    where training got to (a value)."""

    history: Any
    stopped: Preempted | None = None
    position: Position = field(default_factory=lambda: Position(0, 0, 0))


# The one place that orders callbacks. Keras calls them in list order at every hook:
_ORDER = (
    "track",        # position first: every other hook reads it
    "random",       # one warning about random draws no checkpoint holds (first step)
    "padding",      # a padding step's metric updates undone before anyone reads them
    "moving_stats",  # BatchNormalization's statistics averaged before validation and the guard
    "sync",         # the divergence guard, before anyone records a diverged state
    "average",      # epoch metrics become all processes' data's before anyone reads them
    "outputs",      # a custom test_step's non-metric values: mean over batches, all ranks
    "sequence",     # the user's Sequence.on_epoch_end, as Keras would call it
    "states_in",    # a resumed CSVLogger appends to its file (before it opens it)
    "user",         # the script's callbacks see averaged metrics
    "states",       # the script's callbacks' state put back after their on_train_begin
    "reporter",     # records what the user's callbacks may have changed (EarlyStopping)
    "history",      # the run's History, before a checkpoint saves it
    "tensorboard",
    "checkpoint",   # after the records of the step it saves
    "stop_at",      # a planned mid-epoch end of this model.fit call
    "stopper",      # last: a stop checkpoints after everything else ran for the batch
)


def callbacks_in_order(hooks: dict[str, Any], user: list[Callback]) -> list[Callback]:
    """det_sdk's callbacks around the user's, in the pinned order above.

    >>> callbacks_in_order({"stopper": "s", "track": "t"}, ["u"])
    ['t', 'u', 's']
    """
    unknown = set(hooks) - set(_ORDER)
    if unknown:
        raise StateError(f"no place for callbacks {sorted(unknown)}")
    out: list[Callback] = []
    for name in _ORDER:
        if name == "user":
            out.extend(user)
        elif hooks.get(name) is not None:
            out.append(hooks[name])
    return out


def run_fit(loop: TrainingLoop, model: Any, kwargs: dict[str, Any],
            stage: Stage) -> FitOutcome:
    """See :meth:`KerasContext.fit`. ``stage``: the stage of the run this fit is
    (det_sdk.stages: where it resumes, whether the searcher's length applies)."""
    return PlannedFit(loop, model, kwargs, stage).run()


class PlannedFit:
    """One ``context.fit``, in the order it goes: the data as each process takes it,
    the lengths (the script's epochs or the searcher's operations), where it resumes
    (which makes its :class:`FitRun`), det_sdk's callbacks around the user's, then the
    ``model.fit`` calls to each target, completing each searcher operation, and the
    last checkpoint. The FitRun decides; this plans. ``run_fit`` is
    ``PlannedFit(...).run()``."""

    def __init__(self, loop: TrainingLoop, model: Any, kwargs: dict[str, Any],
                 stage: Stage) -> None:
        if not isinstance(model, _compat.keras.Model):
            raise ArgumentTypeError("context.fit: model must be a keras.Model, got "
                                    f"{type(model).__name__}")
        if _compat.model_optimizer(model) is None:
            raise UsageError("context.fit: compile the model first "
                             "(model.compile(optimizer=...))")
        self.loop, self.model, self.kwargs, self.stage = loop, model, kwargs, stage
        self.dist, self.core, self.policy = loop.distributed, loop.core, loop.policy

    def run(self) -> FitOutcome:
        inputs = self._shape_inputs()
        self.loop.prepare(self.model, inputs.sample_input, inputs.sample_batch)
        operation, script_epochs, steps, period = self._lengths()
        _check_validation(self.model, inputs, operation, self.policy.searcher_metric)
        start, uuid, past = self._resume()
        if self.stage.finished:  # nothing to train: a FitRun that only says where it is
            self.loop.current = FitRun(self.loop, self.model, checkpoints=False, start=start,
                                       past=past)
            return _restored_stage(self.loop.current, self.stage)
        user_callbacks, callback_states = self._user_callbacks(uuid)
        searched = self.stage.searched
        run = FitRun(self.loop, self.model, checkpoints=self.policy.checkpoint_period is not None,
                     start=start, past=past, callback_states=callback_states,
                     stage=self.stage.name, searched=searched)
        self.loop.current = run
        run.pipeline = inputs.pipeline
        if uuid is not None and inputs.pipeline is not None:
            _resume_pipeline(self.loop, uuid, inputs.pipeline, start)
        if uuid is not None and start.batch:
            run.continue_epoch_metrics(_epoch_metrics(self.loop, uuid))
        if inputs.validation is not None:
            _replay_validation_passes(inputs.validation, run.validation_passes)
        reporter = MetricsReporter(
            self.core.train, run, self.dist, publish=self.dist.is_chief,
            report_every=self.policy.report_every,
            total_steps=_inputs.length_in_steps(
                (self.policy.max_length if searched else None) or operation
                or Length(epochs=script_epochs), steps),
            stage=self.stage.name, searched=searched,
        )
        trainer = _Trainer(self.loop, self.model, self.kwargs, inputs, run, steps, period)
        hooks = self._hooks(run, reporter, callback_states, inputs)
        # use_ema's overwrite of the weights, once where one model.fit would (_compat._finalize)
        with _compat.FinalizeOnce(self.model) as trainer.finalize:
            outcome = self._train(run, trainer, hooks, user_callbacks, operation, script_epochs)
            finalized = outcome.stopped is None and trainer.finalize.finish()
        if finalized:
            run.state_changed()  # a checkpoint of this position holds the weights before
        if outcome.stopped is None and (trainer.trained or finalized):
            run.save()
        self.loop.wait_for_checkpoints()  # a stop or the end reports only what is on disk
        _compat.set_history_model(run.history, self.model)
        outcome.position = run.position
        return outcome

    def _shape_inputs(self) -> FitInputs:
        """The data as each process takes it, made once (``_fit_inputs``: one adapter for
        the training data's kind): the same number of steps everywhere (padded with
        weight-0 rows or batches), validation shared out, class weights in the
        pipeline. Its keywords leave ``self.kwargs``, which keeps the fit's others."""
        self.inputs = fit_inputs(self.dist, self.kwargs)
        return self.inputs

    def _lengths(self) -> tuple[Length | None, int, int | None, Length | None]:
        """(the searcher's current operation, the script's epochs, steps per epoch, the
        validation period). On the cluster the searcher sets the length of the searched
        stage, one operation at a time; ``epochs`` is the script's own (off the cluster,
        the other stages, or when the experiment gives no length)."""
        operation = self.loop.searcher.current_length() if self.stage.searched else None
        script_epochs = int(self.kwargs.pop("epochs", 1))
        steps = self.inputs.steps_per_epoch()
        period = _inputs.validation_period(self.policy.validation_period,
                                           self.kwargs.pop("validation_freq", None),
                                           self.inputs.validation is not None)
        return operation, script_epochs, steps, period

    def _resume(self) -> tuple[Position, str | None, dict[str, Any] | None]:
        """Where this stage starts (its own latest checkpoint, or the script's
        ``initial_epoch``), restored, and rank 0's state on every process."""
        initial_epoch = int(self.kwargs.pop("initial_epoch", 0))
        resume, uuid, past = _stage_resume(self.loop, self.stage)
        if uuid is not None:
            _restore(self.loop, self.model, uuid, self.stage)
        self.loop.broadcast(self.model)  # rank 0's state everywhere before the first step
        if self.dist.size > 1:  # one small allgather: a failed start is told as such
            self.loop.check_in_sync(self.model, "at the start of this fit", False,
                                    BROADCAST_MISSED)
        return resume or Position(initial_epoch, 0, 0), uuid, past

    def _user_callbacks(self, uuid: str | None
                        ) -> tuple[list[Callback], _callback_state.CallbackStates]:
        """The script's callbacks as they run here: those that write files on rank 0
        only (README: "Many processes"), relative files kept with the trial on the
        cluster, and their state saved with each checkpoint (restored from rank 0's)."""
        dist, checkpoints = self.dist, self.core.checkpoint
        given = list(self.kwargs.pop("callbacks", None) or [])
        _callback_state.keep_files_with_trial(given, self.core.files_dir,
                                              announce=dist.is_chief)
        user_callbacks = chief_only_callbacks(given, dist)
        states = _callback_state.CallbackStates(given, user_callbacks)
        if uuid is not None:
            states.restore(dist.broadcast(
                _callback_state.saved_state(checkpoints.checkpoint_path(uuid)) if dist.is_chief
                else None))
        if dist.size > 1 and not dist.is_chief:
            self.kwargs["verbose"] = 0  # one progress bar, rank 0's
        return user_callbacks, states

    def _hooks(self, run: FitRun, reporter: MetricsReporter,
               states: _callback_state.CallbackStates, inputs: FitInputs) -> dict[str, Any]:
        """det_sdk's callbacks by their place in ``_ORDER`` (the stopper comes in
        ``_train``, with the stop requests it reads)."""
        dist, model, loop = self.dist, self.model, self.loop
        seq = inputs.sequence
        hooks: dict[str, Any] = {
            "track": TrackPosition(run),
            "reporter": reporter,
            "history": RecordHistory(run),
            "sequence": SequenceEpochEnd(seq) if seq is not None else None,
            "states_in": states.before_user(),
            "states": states,
            "outputs": AverageStepOutputs(dist, inputs.validation_rows()),
        }
        if dist.is_chief:
            hooks["random"] = WarnUnsavedRandomness(log)
        if dist.size > 1:
            hooks["moving_stats"] = AverageMovingStatistics(
                lambda: loop.average_moving_statistics(model))
            hooks["sync"] = CheckInSync(
                lambda where, state: loop.check_in_sync(model, where, state), run)
            hooks["average"] = AggregateMetrics(dist)
            if inputs.first_padding is not None:
                hooks["padding"] = UndoPaddingMetrics(inputs.first_padding, run)
        if dist.is_chief and self.core.tensorboard_dir is not None:
            hooks["tensorboard"] = TensorBoardScalars(self.core.tensorboard_dir, run)
        if self.policy.checkpoint_period is not None:
            hooks["checkpoint"] = periodic_checkpoint(self.policy.checkpoint_period, run)
        return hooks

    def _train(self, run: FitRun, trainer: _Trainer, hooks: dict[str, Any],
               user_callbacks: list[Callback], operation: Length | None,
               script_epochs: int) -> FitOutcome:
        """One searcher operation after another (off the cluster: the script's epochs),
        until the searcher says stop, a callback ends training, or a stop is asked for."""
        outcome = FitOutcome(run.history)
        with catch_stop_signals() as stop_signal:
            # the master's request is acknowledged by _exit_stopped, once the checkpoint
            # is saved (acknowledge=False)
            hooks["stopper"] = StopOnSignal(
                StopAgreement(self.dist, self.core.preempt, stop_signal), run,
                every=1 if self.dist.size == 1 else STOP_CHECK_EVERY,
            )
            trainer.callbacks = lambda extra: callbacks_in_order({**hooks, **extra},
                                                                 user_callbacks)
            try:
                target = operation or Length(epochs=script_epochs)
                while trainer.train_to(target, last=operation is None) \
                        and operation is not None:
                    operation = _complete_operation(run, self.inputs, operation,
                                                    hooks["reporter"])
                    if operation is None:
                        break  # the searcher says stop
                    target = operation
            except Preempted as stop:
                outcome.stopped = stop
            except BaseException:
                _finish_writes_quietly(self.loop)  # the write in flight completes; the error wins
                raise
        return outcome


def _stage_resume(loop: TrainingLoop, stage: Stage
                  ) -> tuple[Position | None, str | None, dict[str, Any] | None]:
    """Where ``stage`` resumes: its own latest checkpoint, or nowhere (a fresh stage)."""
    loop.resume_uuid = None  # the run's latest is some stage's: each stage finds its own
    return loop.resume_point(stage.resume_uuid)


def _restore(loop: TrainingLoop, model: Any, uuid: str, stage: Stage) -> None:
    """The checkpoint's state into the model; a stage's checkpoint that does not fit the
    script's model is refused naming the stage."""
    try:
        loop.restore(model, uuid)
    except ValueError as err:
        raise StageMismatchError(
            f"stage {stage.name!r} (fit number {stage.index + 1} of the script): the run's "
            f"checkpoint of this stage does not fit the model the script trains in it: "
            f"{str(err).rstrip('.?')}. Resume with the script that made the run (same "
            "stages, same models in the same order)") from None


def _resume_pipeline(loop: TrainingLoop, uuid: str, pipeline: PipelinePosition,
                     start: Position) -> None:
    """The training pipeline where checkpoint ``uuid`` left it, this process's."""
    path = loop.core.checkpoint.checkpoint_path(uuid)
    meta = _checkpoint.read_metadata(path).get("pipeline")
    saved = _checkpoint.read_group(path, f"pipeline:{loop.distributed.rank}") \
        if isinstance(meta, dict) else []
    pipeline.resume([a.tobytes() or None for a in saved],
                    meta if isinstance(meta, dict) else None, start.batch)


def _replay_validation_passes(validation: Validation, passes: int) -> None:
    """A ``tf.data`` validation set where the run's validations left it: each pass (a
    new iterator) drew its shuffle's order from a seed generator the dataset keeps, so
    a resumed run that made ``passes`` validations before its checkpoint starts as many
    iterators (none read) to validate the next epoch in the uninterrupted run's order."""
    x = validation.parts[0]
    if passes and isinstance(x, tf.data.Dataset):
        for _ in range(passes):
            iter(x)


def _epoch_metrics(loop: TrainingLoop, uuid: str) -> list[np.ndarray] | None:
    """This process's training-metric state in the epoch checkpoint ``uuid`` stopped in
    (None: saved before det_sdk kept it). Resumed on another number of processes, rank
    0 takes every saved process's state summed (the epoch's results sum the processes'
    states: ``aggregated_results``) and the others start from nothing."""
    path = loop.core.checkpoint.checkpoint_path(uuid)
    dist = loop.distributed
    saved: list[list[np.ndarray]] = []
    while (part := _checkpoint.read_group(path, f"metrics:{len(saved)}")):
        saved.append(part)
    if not saved:
        return None
    if len(saved) == dist.size:
        return saved[dist.rank]
    if dist.rank or len({len(p) for p in saved}) > 1:
        return None
    return [np.sum(np.stack(parts), axis=0).astype(parts[0].dtype) for parts in zip(*saved)]


def _check_validation(model: Any, inputs: FitInputs, operation: Length | None,
                      metric: str | None) -> None:
    """Refuse, before the first step, a fit that will need a validation it cannot do:
    the searcher's (on the cluster) without validation data, or any validation of a
    model Keras cannot evaluate (its own ``train_step``, neither ``test_step`` nor
    ``call``: Keras's ``test_step`` calls the model)."""
    if operation is not None and inputs.validation is None:
        raise UsageError(
            f"context.fit: the searcher decides by the validation metric {metric!r}, and "
            "this fit has no validation data; pass validation_data=(x_val, y_val), "
            "x_val=/y_val= or validation_split=<fraction> to the fit the searcher sets the "
            "length of")
    if (inputs.validation is not None and not _compat.overrides_test_step(model)
            and not _compat.implements_call(model)):
        raise UsageError(
            f"context.fit: {type(model).__name__} has its own train_step but neither "
            "test_step nor call(), so Keras cannot validate it (its test_step calls the "
            "model); add a test_step(self, data) to the model that returns the metrics to "
            "validate by (a dict, e.g. {'loss': ...}"
            + (f", with {metric.removeprefix('val_')!r} for the searcher" if metric else "")
            + "), or pass no validation data")


def _restored_stage(run: FitRun, stage: Stage) -> FitOutcome:
    """A stage the resumed run had finished: its model restored, nothing trained."""
    _compat.set_history_model(run.history, run.model)
    if run.loop.distributed.is_chief:
        log.warning("det_sdk: stage %r was finished before the resume: its model restored from "
                    "checkpoint %s (epoch %d, batch %d), not trained again", stage.name,
                    stage.resume_uuid, run.epoch, run.batch)
    return FitOutcome(run.history, position=run.position)


def _finish_writes_quietly(loop: TrainingLoop) -> None:
    try:
        loop.wait_for_checkpoints()
    except Exception as err:  # already failing: say it, do not hide the first error
        log.error("det_sdk: %s", err)


class _Trainer:
    """The ``model.fit`` calls that take training to a target, collected in one History.
    ``kwargs``: the fit's keywords other than the data's, which ``inputs`` gives each
    call."""

    def __init__(
        self, loop: TrainingLoop, model: Any, kwargs: dict[str, Any], inputs: FitInputs,
        run: FitRun, steps: int | None, period: Length | None,
    ) -> None:
        self.loop, self.model, self.kwargs, self.inputs, self.run = loop, model, kwargs, inputs, run
        self.steps, self.period = steps, period
        self.callbacks: Callable[[dict[str, Any]], list[Callback]] = lambda extra: []
        self.trained = False
        self.finalize = _compat.FinalizeOnce(model)

    def train_to(self, target: Length, last: bool = True) -> bool:
        """Train from the current position to ``target``, validating as planned.
        ``last``: training ends at ``target`` (not a searcher's length, which may go on).

        False when a callback (EarlyStopping, ...) ended training before it.
        """
        run = self.run
        calls = plan_calls(run.epoch, run.batch, target=target,
                           steps_per_epoch=self.steps, validation_period=self.period)
        for call in calls:
            call_kwargs = {**self.kwargs, **self.inputs.call_inputs(call, self.loop.policy.seed)}
            extra = {"stop_at": StopAt(run, call.stop_at)} if call.stop_at else {}
            callbacks = self.callbacks(extra)
            if call.start_batch and self.steps is not None:
                # the rest of an epoch: callbacks see it as the uninterrupted run shows it
                callbacks = ResumedEpoch(callbacks, model=self.model, epoch=call.initial_epoch,
                                         start=call.start_batch, steps=self.steps,
                                         epochs=call.epochs,
                                         verbose=call_kwargs.get("verbose", "auto"),
                                         carried=run.epoch_metrics())
            self.finalize.ends_training_when(self._ends_training(call, last and call is calls[-1]))
            with self._feeding(call):
                h = self.model.fit(
                    **call_kwargs, epochs=call.epochs, initial_epoch=call.initial_epoch,
                    callbacks=callbacks,
                )
            self.trained = True
            run.history.params = h.params
            if self.model.stop_training and not run.reached(call.stop_at):
                return False
        return True

    def _ends_training(self, call: FitCall, last: bool) -> Callable[[], bool]:
        """Asked as ``call`` ends: whether training ends with it (the last call to the final
        target, or a callback such as EarlyStopping stopped it before its planned end)."""
        return lambda: last or (self.model.stop_training and not self.run.reached(call.stop_at))

    def _feeding(self, call: FitCall) -> ContextManager[None]:
        """The call's training pipeline read from where it was left (a ``tf.data``
        dataset's, ``_fit_inputs.PipelinePosition``)."""
        pipeline = self.inputs.pipeline
        if pipeline is None:
            return nullcontext()
        run = self.run
        return pipeline.feeding(self.model, lambda: run.steps_completed,
                                mid_epoch=bool(call.start_batch))


def _complete_operation(run: FitRun, inputs: FitInputs, operation: Length,
                        reporter: MetricsReporter) -> Length | None:
    """Tell the searcher its length is trained, with its metric; its next length, or None.

    The plan validated at the target. A trial resumed exactly there (it stopped
    after its checkpoint, before telling the master) validates again: the same
    weights give the same metric. ``run.complete`` checkpoints first.
    """
    loop = run.loop
    assert inputs.validation is not None  # _check_validation refused it before the first step
    if not run.validated_here:
        run.validated(_validate_now(loop, run.model, inputs.validation))
        if loop.distributed.is_chief:
            reporter.report("validation", run.steps_completed, run.last_validation)
    return run.complete(operation, run.last_validation, among="the validation metrics",
                        hint="name one of them in the experiment config")


def _validate_now(loop: TrainingLoop, model: Any, validation: Validation) -> dict[str, float]:
    """The validation metrics of the model as it is (``val_`` names, as fit reports them)."""
    x, y, sw = validation.parts
    results = loop.evaluate_all(model, x, y, sample_weight=sw, verbose=0,
                                batch_size=validation.batch_size)
    return {f"val_{k}": float(v) for k, v in results.items()}
