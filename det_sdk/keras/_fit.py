"""``context.fit``: Keras's ``model.fit`` with validation required, resumption, and records.

One call trains from where the run's latest checkpoint left off to the end of the
training length: the script's ``epochs`` off the cluster; on it, the searcher's
operations one after another ("train to length L, validate, report the searcher
metric", then continue or stop as the searcher says). ``_plan.plan_calls`` cuts
each stretch into ``model.fit`` calls that start and end where needed (mid-epoch
resumption, mid-epoch validation).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import tensorflow as tf

from det_sdk.config import Length
from det_sdk.keras import _data
from det_sdk.keras._callbacks import (
    AverageMetrics,
    BroadcastState,
    MetricsReporter,
    PeriodicCheckpoint,
    Position,
    Preempted,
    RestoreState,
    StopAt,
    StopOnSignal,
    TensorBoardScalars,
    TrackPosition,
    catch_stop_signals,
)
from det_sdk.keras._plan import FitCall, plan_calls

if TYPE_CHECKING:
    from det_sdk.keras._context import KerasContext

__all__ = ["fit"]

# With several processes, how often (in batches) they agree whether to stop: a
# collective per batch would cost more than small batches take.
STOP_CHECK_EVERY = 10


def _rows(data: Any) -> int | None:
    """Sample count of validation data given as arrays (None for other kinds)."""
    x = data[0] if isinstance(data, tuple) else data
    return _data.num_rows(x) if _data.is_array_data(x) else None


def _check_same_steps(ctx: KerasContext, seg_kwargs: dict[str, Any]) -> None:
    """Every process must run the same number of steps, or Horovod hangs: check first."""
    if ctx.distributed.size == 1:
        return
    steps = seg_kwargs.get("steps_per_epoch")
    x = seg_kwargs.get("x")
    if steps is None and isinstance(x, tf.keras.utils.Sequence):
        steps = len(x)
    elif steps is None and isinstance(x, tf.data.Dataset):
        steps = int(x.cardinality())
    every = ctx.distributed.allgather(steps)
    if len(set(every)) > 1:
        raise ValueError(
            "context.fit: the processes would run different numbers of steps per epoch "
            f"({', '.join(f'rank {r}: {s}' for r, s in enumerate(every))}); Horovod needs "
            "the same on all. Shard the data with context.wrap_data, or pass steps_per_epoch."
        )


def _steps_per_epoch(ctx: KerasContext, kwargs: dict[str, Any]) -> int | None:
    """Batches per epoch of the training input, when it can be known up front."""
    x = kwargs.get("x")
    if kwargs.get("steps_per_epoch"):
        return int(kwargs["steps_per_epoch"])
    if _data.is_array_data(x):
        if _data.is_wrapped(x):
            rows, size = _data.num_rows(_data.full_data(x)), ctx.distributed.size
        else:
            rows, size = _data.num_rows(x), 1
        return math.ceil(rows / ((kwargs.get("batch_size") or 32) * size))
    if isinstance(x, tf.keras.utils.Sequence):
        return len(_data.EpochSequence(x, seed=0, shuffle=False, epoch=0, start_batch=0))
    if isinstance(x, tf.data.Dataset):
        n = int(x.cardinality())
        return n if n > 0 else None
    return None


def _validation_data(kwargs: dict[str, Any]) -> None:
    """Fold the proposal's ``x_val``/``y_val`` into ``validation_data``; require some."""
    x_val, y_val = kwargs.pop("x_val", None), kwargs.pop("y_val", None)
    if x_val is not None or y_val is not None:
        if kwargs.get("validation_data") is not None:
            raise ValueError("context.fit: give validation data once: either validation_data "
                             "or x_val/y_val, not both")
        if x_val is None:
            raise ValueError("context.fit: y_val was given without x_val")
        kwargs["validation_data"] = x_val if y_val is None else (x_val, y_val)
    if kwargs.get("validation_data") is None and not kwargs.get("validation_split"):
        raise ValueError(
            "context.fit requires validation data: pass validation_data=(x_val, y_val), "
            "x_val=/y_val=, or validation_split=<fraction>"
        )


def _split_arrays(ctx: KerasContext, kwargs: dict[str, Any]) -> None:
    """``validation_split`` for numpy: the last fraction of the data, as Keras does."""
    frac = kwargs.pop("validation_split", 0.0) or 0.0
    if not frac:
        return
    if not 0 < frac < 1:
        raise ValueError(f"context.fit: validation_split must be in (0, 1), got {frac}")
    if not _data.is_array_data(kwargs.get("x")):
        raise ValueError("context.fit: validation_split works with numpy arrays only; "
                         "pass validation_data for a Sequence or tf.data.Dataset")
    names = [k for k in ("x", "y", "sample_weight") if kwargs.get(k) is not None]
    wrapped = _data.is_wrapped(kwargs["x"])
    # Split the whole data set (not this process's shard), then shard both parts again.
    parts = [_data.full_data(kwargs[k]) if wrapped else kwargs[k] for k in names]
    n = _data.num_rows(parts[0])
    cut = int(n * (1 - frac))
    if cut == 0 or cut == n:
        raise ValueError(f"context.fit: validation_split={frac} of {n} samples leaves an "
                         "empty training or validation set")
    train = [_data.slice_rows(p, None, cut) for p in parts]
    val = [_data.slice_rows(p, cut, None) for p in parts]
    if wrapped:
        train = _as_list(_data.wrap_data(ctx.distributed, *_by_name(names, train)))
        val = _as_list(_data.wrap_data(ctx.distributed, *_by_name(names, val)))
    kwargs.update(zip(names, train))
    kwargs["validation_data"] = tuple(val)


def _by_name(names: list[str], parts: list[Any]) -> tuple[Any, Any, Any]:
    """(x, y, sample_weight) from the parts present, None for the missing ones."""
    given = dict(zip(names, parts))
    return given.get("x"), given.get("y"), given.get("sample_weight")


def _as_list(parts: Any) -> list[Any]:
    return list(parts) if isinstance(parts, tuple) else [parts]


def _call_inputs(ctx: KerasContext, kwargs: dict[str, Any], call: FitCall) -> dict[str, Any]:
    """The data arguments of one ``model.fit`` call, positioned at its start."""
    x = kwargs.get("x")
    shuffle = kwargs.get("shuffle", True)
    out: dict[str, Any] = {"validation_freq": call.validate_epochs}
    if _data.is_array_data(x):
        if kwargs.get("steps_per_epoch") is not None:
            raise ValueError("context.fit: steps_per_epoch is not supported with numpy input "
                             "(an epoch is one pass over the arrays)")
        batch_size = kwargs.get("batch_size") or 32
        ds, steps = _data.array_pipeline(
            x, kwargs.get("y"), kwargs.get("sample_weight"),
            batch_size=batch_size, seed=ctx.seed, shuffle=bool(shuffle),
            start_epoch=call.initial_epoch, start_batch=call.start_batch, end_epoch=call.epochs,
        )
        out.update(x=ds, y=None, sample_weight=None, batch_size=None,
                   steps_per_epoch=steps - call.start_batch, shuffle=False)
        out.setdefault("validation_batch_size", kwargs.get("validation_batch_size") or batch_size)
    elif isinstance(x, tf.keras.utils.Sequence):
        out.update(x=_data.EpochSequence(x, seed=ctx.seed, shuffle=bool(shuffle),
                                   epoch=call.initial_epoch, start_batch=call.start_batch),
                   shuffle=False)
    elif isinstance(x, tf.data.Dataset):
        if call.start_batch:
            steps = kwargs.get("steps_per_epoch") or int(x.cardinality())
            if steps < 0:
                raise ValueError("context.fit: cannot resume a tf.data.Dataset of unknown "
                                 "length in mid-epoch; pass steps_per_epoch")
            out.update(x=x.skip(call.start_batch), steps_per_epoch=steps - call.start_batch)
    elif x is None:
        raise ValueError("context.fit: x (the training data) is required")
    return out


def _validation_period(ctx: KerasContext, kwargs: dict[str, Any]) -> Length | None:
    """The config's ``min_validation_period``, else Keras's ``validation_freq`` (an int)."""
    freq = kwargs.pop("validation_freq", None)
    if ctx.validation_period is not None:
        return ctx.validation_period
    if freq is None or freq == 1:
        return None
    if not isinstance(freq, int) or freq < 1:
        raise ValueError(f"context.fit: validation_freq must be a positive int, got {freq!r} "
                         "(or set min_validation_period in the config)")
    return Length(epochs=freq)


def _length_in_steps(length: Length | None, steps: int | None) -> int | None:
    if length is None or steps is None:
        return length.batches if length is not None else None
    return length.epochs * steps if length.epochs is not None else length.batches


def fit(ctx: KerasContext, model: tf.keras.Model, **kwargs: Any) -> tf.keras.callbacks.History:
    """See :meth:`KerasContext.fit`."""
    if not isinstance(model, tf.keras.Model):
        raise TypeError(f"context.fit: model must be a keras.Model, got {type(model).__name__}")
    if model.optimizer is None:
        raise ValueError("context.fit: compile the model first (model.compile(optimizer=...))")
    _validation_data(kwargs)
    _split_arrays(ctx, kwargs)
    dist = ctx.distributed

    # On the cluster the searcher sets the length, one operation at a time; `epochs`
    # is the script's own (off the cluster, or when the experiment gives no length).
    operation = dist.broadcast(ctx.session.training_length() if dist.is_chief else None)
    script_epochs = int(kwargs.pop("epochs", 1))
    steps = _steps_per_epoch(ctx, kwargs)
    period = _validation_period(ctx, kwargs)
    initial_epoch = int(kwargs.pop("initial_epoch", 0))
    resume = ctx._resume_position()
    position = Position(**resume) if resume else Position(initial_epoch, 0, 0)
    restore = _once(ctx._restore_latest(model))
    ctx._resume_uuid, ctx._position = None, position

    user_callbacks = list(kwargs.pop("callbacks", None) or [])
    ours_first: list[tf.keras.callbacks.Callback] = [TrackPosition(position)]
    if resume:
        ours_first.append(RestoreState(restore))
    if dist.size > 1:
        ours_first.append(BroadcastState(lambda: ctx._broadcast_state(model)))
        ours_first.append(AverageMetrics(dist, _rows(kwargs.get("validation_data"))))
        if not dist.is_chief:
            kwargs["verbose"] = 0  # one progress bar, rank 0's
    reporter = MetricsReporter(
        ctx.session, position, dist, publish=dist.is_chief, report_every=ctx.report_every,
        total_steps=_length_in_steps(ctx.max_length or operation or Length(epochs=script_epochs),
                                     steps),
    )
    ours_last: list[tf.keras.callbacks.Callback] = [reporter]
    save = _Saver(ctx, model, position, reporter)
    if dist.is_chief and ctx.session.tensorboard_dir is not None:
        ours_last.append(TensorBoardScalars(ctx.session.tensorboard_dir, position))
    if ctx.checkpoint_period is not None:
        ours_last.append(PeriodicCheckpoint(ctx.checkpoint_period, position, save))

    with catch_stop_signals() as stop_signal:
        def should_stop() -> str | None:
            return stop_signal() or ("preempted by the master" if ctx.session.should_preempt()
                                     else None)

        stopper = StopOnSignal(
            should_stop, save if ctx.checkpoint_period else lambda: None, dist,
            every=1 if dist.size == 1 else STOP_CHECK_EVERY,
        )
        trainer = _Trainer(ctx, model, kwargs, position, steps, period,
                           [*ours_first, *user_callbacks, *ours_last], stopper)
        try:
            # one searcher operation after another (off the cluster: the script's epochs)
            target = operation or Length(epochs=script_epochs)
            while trainer.train_to(target) and operation is not None:
                operation = _complete_operation(ctx, model, kwargs, operation, position,
                                                reporter, save, restore)
                if operation is None:
                    break  # the searcher says stop
                target = operation
        except Preempted as stop:
            _exit_preempted(ctx, stop, position)
    restore()  # a no-op unless nothing was trained: then it hands back the checkpoint's state
    if ctx.checkpoint_period is not None and trainer.trained:
        save()
    trainer.history.model = model
    return trainer.history


class _Trainer:
    """The ``model.fit`` calls that take training to a target, collected in one History."""

    def __init__(
        self, ctx: KerasContext, model: tf.keras.Model, kwargs: dict[str, Any],
        position: Position, steps: int | None, period: Length | None,
        callbacks: list[tf.keras.callbacks.Callback], stopper: StopOnSignal,
    ) -> None:
        self.ctx, self.model, self.kwargs = ctx, model, kwargs
        self.position, self.steps, self.period = position, steps, period
        self.callbacks, self.stopper = callbacks, stopper
        self.history = tf.keras.callbacks.History()
        self.history.history, self.history.epoch = {}, []
        self.trained = False

    def train_to(self, target: Length) -> bool:
        """Train from the current position to ``target``, validating as planned.

        False when a callback (EarlyStopping, ...) ended training before it.
        """
        pos = self.position
        for call in plan_calls(pos.epoch, pos.batch, target=target,
                               steps_per_epoch=self.steps, validation_period=self.period):
            call_kwargs = {**self.kwargs, **_call_inputs(self.ctx, self.kwargs, call)}
            _check_same_steps(self.ctx, call_kwargs)
            stop_at = [StopAt(pos, call.stop_at)] if call.stop_at else []
            h = self.model.fit(
                **call_kwargs, epochs=call.epochs, initial_epoch=call.initial_epoch,
                callbacks=[*self.callbacks, *stop_at, self.stopper],
            )
            self.trained = True
            for k, v in h.history.items():
                self.history.history.setdefault(k, []).extend(v)
            self.history.epoch.extend(h.epoch)
            self.history.params = h.params
            if self.model.stop_training and not _reached(pos, call.stop_at):
                return False
        return True


def _once(fn: Callable[[], None]) -> Callable[[], None]:
    done: list[bool] = []

    def call() -> None:
        if not done:
            done.append(True)
            fn()

    return call


def _reached(position: Position, stop_at: tuple[int, int] | None) -> bool:
    return stop_at is not None and (position.epoch, position.batch) >= stop_at


def _complete_operation(
    ctx: KerasContext, model: tf.keras.Model, kwargs: dict[str, Any], operation: Length,
    position: Position, reporter: MetricsReporter, save: _Saver, restore: Callable[[], None],
) -> Length | None:
    """Tell the searcher its length is trained, with its metric; its next length, or None.

    The plan validated at the target. A trial resumed exactly there (it stopped
    after its checkpoint, before telling the master) validates again: the same
    weights give the same metric. A checkpoint is taken first, so a trial the
    searcher stops keeps it, and a promoted one that crashes resumes from here.
    """
    dist = ctx.distributed
    if reporter.last_validation_steps != position.steps_completed:
        restore()  # the checkpoint's state, unless a call of this fit restored it already
        reporter.last_validation = _validate_now(ctx, model, kwargs)
        reporter.last_validation_steps = position.steps_completed
        if dist.is_chief:
            ctx.session.report_metrics("validation", position.steps_completed, position.epoch,
                                       reporter.last_validation)
    if ctx.checkpoint_period is not None:
        save()
    metric = None
    if dist.is_chief:
        name = ctx.searcher_metric
        if name not in reporter.last_validation:
            raise ValueError(
                f"searcher.metric: {name!r} is not among the validation metrics "
                f"({', '.join(sorted(reporter.last_validation)) or 'none'}); name one of "
                "them in the experiment config"
            )
        metric = reporter.last_validation[name]
    return dist.broadcast(
        ctx.session.complete_operation(operation, metric) if dist.is_chief else None)


def _validate_now(ctx: KerasContext, model: tf.keras.Model,
                  kwargs: dict[str, Any]) -> dict[str, float]:
    """The validation metrics of the model as it is (``val_`` names, as fit reports them)."""
    data = kwargs["validation_data"]
    parts = data if isinstance(data, tuple) else (data,)
    x, y, sw = (*parts, None, None)[:3]
    results = ctx._evaluate_all(model, x, y, sample_weight=sw, verbose=0,
                                batch_size=kwargs.get("validation_batch_size")
                                or kwargs.get("batch_size"))
    return {f"val_{k}": float(v) for k, v in results.items()}


class _Saver:
    """Save a checkpoint at the current position, once per position."""

    def __init__(
        self, ctx: KerasContext, model: tf.keras.Model, position: Position,
        reporter: MetricsReporter,
    ) -> None:
        self.ctx, self.model, self.position, self.reporter = ctx, model, position, reporter
        self._last: tuple[int, str | None] | None = None

    def __call__(self) -> str | None:
        if self._last is None or self._last[0] != self.position.steps_completed:
            uuid = self.ctx._save_checkpoint(self.model, self.position,
                                             self.reporter.last_validation)
            self._last = (self.position.steps_completed, uuid)
        return self._last[1]


def _exit_preempted(ctx: KerasContext, stop: Preempted, position: Position) -> None:
    where = f"epoch {position.epoch}, batch {position.batch}"
    if ctx.distributed.is_chief:
        saved = f"checkpoint {stop.uuid} saved" if stop.uuid else "no checkpoint saved"
        hint = ctx.session.resume_hint() if hasattr(ctx.session, "resume_hint") else ""
        print(f"det_sdk: stopped by {stop.reason} at {where}; {saved}. {hint}".rstrip(),
              file=sys.stderr, flush=True)
    ctx.close()
    raise SystemExit(130 if stop.reason == "SIGINT" else 0)
