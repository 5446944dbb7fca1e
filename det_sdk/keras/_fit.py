"""``context.fit``: Keras's ``model.fit`` with validation required, resumption, and records.

One call trains from where the run's latest checkpoint left off to the end of the
training length. A checkpoint taken in the middle of an epoch is continued with a
short first ``model.fit`` over the rest of that epoch, then one over whole epochs:
Keras's ``steps_per_epoch`` is the same for every epoch of one call.
"""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, Any

import tensorflow as tf

from det_sdk.keras import _data
from det_sdk.keras._callbacks import (
    AverageMetrics,
    BroadcastState,
    MetricsReporter,
    PeriodicCheckpoint,
    Position,
    Preempted,
    RestoreState,
    StopAtSteps,
    StopOnSignal,
    TensorBoardScalars,
    TrackPosition,
    catch_stop_signals,
)

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


class _Segment:
    """One ``model.fit`` call: epochs [initial_epoch, epochs), maybe from mid-epoch."""

    def __init__(self, initial_epoch: int, epochs: int, start_batch: int) -> None:
        self.initial_epoch = initial_epoch
        self.epochs = epochs
        self.start_batch = start_batch


def _segments(start_epoch: int, start_batch: int, end_epoch: int) -> list[_Segment]:
    if start_epoch >= end_epoch:
        return []
    if start_batch == 0:
        return [_Segment(start_epoch, end_epoch, 0)]
    rest = [_Segment(start_epoch + 1, end_epoch, 0)] if start_epoch + 1 < end_epoch else []
    return [_Segment(start_epoch, start_epoch + 1, start_batch), *rest]


def _segment_inputs(
    ctx: KerasContext, kwargs: dict[str, Any], seg: _Segment
) -> dict[str, Any]:
    """The data arguments of one segment's ``model.fit``, positioned at its start."""
    x = kwargs.get("x")
    shuffle = kwargs.get("shuffle", True)
    out: dict[str, Any] = {}
    if _data.is_array_data(x):
        if kwargs.get("steps_per_epoch") is not None:
            raise ValueError("context.fit: steps_per_epoch is not supported with numpy input "
                             "(an epoch is one pass over the arrays)")
        batch_size = kwargs.get("batch_size") or 32
        ds, steps = _data.array_pipeline(
            x, kwargs.get("y"), kwargs.get("sample_weight"),
            batch_size=batch_size, seed=ctx.seed, shuffle=bool(shuffle),
            start_epoch=seg.initial_epoch, start_batch=seg.start_batch, end_epoch=seg.epochs,
        )
        out.update(x=ds, y=None, sample_weight=None, batch_size=None,
                   steps_per_epoch=steps - seg.start_batch, shuffle=False)
        out.setdefault("validation_batch_size", kwargs.get("validation_batch_size") or batch_size)
    elif isinstance(x, tf.keras.utils.Sequence):
        out.update(x=_data.EpochSequence(x, seed=ctx.seed, shuffle=bool(shuffle),
                                   epoch=seg.initial_epoch, start_batch=seg.start_batch),
                   shuffle=False)
    elif isinstance(x, tf.data.Dataset):
        if seg.start_batch:
            steps = kwargs.get("steps_per_epoch") or int(x.cardinality())
            if steps < 0:
                raise ValueError("context.fit: cannot resume a tf.data.Dataset of unknown "
                                 "length in mid-epoch; pass steps_per_epoch")
            out.update(x=x.skip(seg.start_batch), steps_per_epoch=steps - seg.start_batch)
    elif x is None:
        raise ValueError("context.fit: x (the training data) is required")
    return out


def fit(ctx: KerasContext, model: tf.keras.Model, **kwargs: Any) -> tf.keras.callbacks.History:
    """See :meth:`KerasContext.fit`."""
    if not isinstance(model, tf.keras.Model):
        raise TypeError(f"context.fit: model must be a keras.Model, got {type(model).__name__}")
    if model.optimizer is None:
        raise ValueError("context.fit: compile the model first (model.compile(optimizer=...))")
    _validation_data(kwargs)
    _split_arrays(ctx, kwargs)

    # On the cluster the searcher sets the length; `epochs` is the script's own
    # (off the cluster, or when the experiment gives no max_length).
    length = ctx.session.training_length()
    script_epochs = int(kwargs.pop("epochs", 1))
    steps = _steps_per_epoch(ctx, kwargs)
    total_steps = None
    if length is None:
        end_epoch = script_epochs
    elif length.epochs is not None:
        end_epoch = length.epochs
    else:
        if steps is None:
            raise ValueError("context.fit: a length in batches needs input of known length "
                             "(numpy, a Sequence, a finite tf.data.Dataset or steps_per_epoch)")
        total_steps = length.value
        end_epoch = math.ceil(total_steps / steps)
    if total_steps is None and steps is not None:
        total_steps = end_epoch * steps
    initial_epoch = int(kwargs.pop("initial_epoch", 0))
    resume = ctx._resume_position()
    position = Position(**resume) if resume else Position(initial_epoch, 0, 0)
    restore = ctx._restore_latest(model)
    ctx._resume_uuid, ctx._position = None, position

    user_callbacks = list(kwargs.pop("callbacks", None) or [])
    dist = ctx.distributed
    ours_first: list[tf.keras.callbacks.Callback] = [TrackPosition(position)]
    if resume:
        ours_first.append(RestoreState(restore))
    if dist.size > 1:
        ours_first.append(BroadcastState(lambda: ctx._broadcast_state(model)))
        ours_first.append(AverageMetrics(dist, _rows(kwargs.get("validation_data"))))
        if not dist.is_chief:
            kwargs["verbose"] = 0  # one progress bar, rank 0's
    ours_last: list[tf.keras.callbacks.Callback] = []
    reporter = MetricsReporter(ctx.session, position, total_steps)
    save = _Saver(ctx, model, position, reporter)
    if ctx.distributed.is_chief:
        ours_last.append(reporter)
        if ctx.session.tensorboard_dir is not None:
            ours_last.append(TensorBoardScalars(ctx.session.tensorboard_dir, position))
    if ctx.checkpoint_period is not None:
        ours_last.append(PeriodicCheckpoint(ctx.checkpoint_period, position, save))
    if length is not None and length.batches is not None:
        ours_last.append(StopAtSteps(position, length.batches))

    history = tf.keras.callbacks.History()
    history.history, history.epoch = {}, []
    segments = _segments(position.epoch, position.batch, end_epoch)
    if not segments and resume:
        restore()  # already trained to the end: hand back the result
    with catch_stop_signals() as stop_signal:
        def should_stop() -> str | None:
            return stop_signal() or ("preempted by the master" if ctx.session.should_preempt()
                                     else None)

        stopper = StopOnSignal(
            should_stop, save if ctx.checkpoint_period else lambda: None, dist,
            every=1 if dist.size == 1 else STOP_CHECK_EVERY,
        )
        try:
            for seg in segments:
                seg_kwargs = {**kwargs, **_segment_inputs(ctx, kwargs, seg)}
                _check_same_steps(ctx, seg_kwargs)
                h = model.fit(
                    **seg_kwargs,
                    epochs=seg.epochs,
                    initial_epoch=seg.initial_epoch,
                    callbacks=[*ours_first, *user_callbacks, *ours_last, stopper],
                )
                for k, v in h.history.items():
                    history.history.setdefault(k, []).extend(v)
                history.epoch.extend(h.epoch)
                history.params = h.params
                if model.stop_training:
                    break  # EarlyStopping and friends end the whole fit
        except Preempted as stop:
            _exit_preempted(ctx, stop, position)
    history.model = model
    if ctx.checkpoint_period is not None and segments:
        save()
    return history


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
