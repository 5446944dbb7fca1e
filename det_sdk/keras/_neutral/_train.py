"""One ``context.fit`` on JAX or PyTorch, from the run's latest checkpoint to its length.

Locally the length is the script's ``epochs``; on the cluster, the searcher's operations
one after another (train to a length, validate, report the searcher metric). Each
stretch is cut into ``model.fit`` calls by :func:`det_sdk.keras._neutral._fit.plan`.

>>> # outcome = run_fit(core, backend, policy, hparams, model, kwargs)
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import keras

from det_sdk.config import Length
from det_sdk.core._context import Context
from det_sdk.engine.policy import TrainingPolicy
from det_sdk.engine.position import Position, position_of
from det_sdk.engine.signals import catch_stop_signals
from det_sdk.errors import ArgumentTypeError, UsageError
from det_sdk.hparams import HParams
from det_sdk.keras._neutral import _data, _state
from det_sdk.keras._neutral._backend import Backend
from det_sdk.keras._neutral._callbacks import CallbackStates
from det_sdk.keras._neutral._fit import (
    DriverCallbacks,
    FitDriver,
    FitState,
    Stopped,
    check_resumable,
    end_of,
    plan,
)

__all__ = ["FitOutcome", "run_fit"]

log = logging.getLogger("det_sdk.keras")

#: what ``context.fit`` passes on to ``model.fit`` as given
PASSED = ("verbose", "validation_batch_size", "validation_freq", "class_weight")


@dataclass
class FitOutcome:
    """The History, where training got to, and the stop that ended it early, if any."""

    history: Any
    position: Position
    stopped: Stopped | None = None


def _validation(kwargs: dict[str, Any]) -> Any:
    data = kwargs.pop("validation_data", None)
    x_val, y_val = kwargs.pop("x_val", None), kwargs.pop("y_val", None)
    if x_val is not None:
        if data is not None:
            raise UsageError("context.fit: give validation_data or x_val/y_val, not both")
        data = (x_val, y_val) if y_val is not None else x_val
    if isinstance(data, (tuple, list)):
        return tuple(_data.as_arrays(p, f"validation_data[{i}]") for i, p in enumerate(data))
    return data


def _validation_split(data: Any, split: Any, validation: Any) -> tuple[Any, Any]:
    """Keras's ``validation_split``: the last ``split`` of the rows, before any shuffle."""
    if validation is not None:
        raise UsageError("context.fit: give validation_data or validation_split, not both")
    if not isinstance(data, tuple):
        raise UsageError("context.fit: validation_split takes arrays, not a PyDataset (as "
                         "in Keras): give validation_data")
    if isinstance(split, bool) or not isinstance(split, (int, float)) or not 0 < split < 1:
        raise ArgumentTypeError(f"context.fit: validation_split must be a fraction between 0 "
                                f"and 1, got {split!r}")
    rows = _data.rows_of(*data, what="context.fit: x, y")
    at = math.floor(rows * (1.0 - float(split)))
    head = tuple(_data.take_rows(part, slice(0, at)) for part in data)
    tail = tuple(_data.take_rows(part, slice(at, rows)) for part in data)
    return head, tail


def _resume_state(core: Context, backend: Backend) -> FitState:
    """Where the run's latest checkpoint left off (every process reads the chief's choice)."""
    dist = core.distributed
    uuid = dist.broadcast(core.checkpoint.latest_checkpoint if dist.is_chief else None)
    if uuid is None:
        return FitState()
    path = core.checkpoint.checkpoint_path(uuid)
    meta, arrays = _state.read_checkpoint(path)
    check_resumable(meta, backend.name)
    pos = position_of(meta)
    state = FitState(epoch=pos.epoch, batch=pos.batch, steps_completed=pos.steps_completed,
                     history={k: list(v) for k, v in (meta.get("history") or {}).items()},
                     restore=arrays, restore_path=path, last_checkpoint=uuid,
                     checkpointed_at=pos.steps_completed,
                     # a length's searcher metric, where it stopped right after validating
                     last_validation={k: v for k, v in (meta.get("metrics") or {}).items()
                                      if k.startswith("val_")})
    state.saved_callbacks = meta.get("callbacks")
    if pos.batch:  # inside an epoch: its metric states so far
        state.carried_metrics = _carried_metrics(arrays, dist.rank, backend,
                                                 int(meta.get("processes", 1)), dist.size)
    return state


def _carried_metrics(arrays: dict[str, list[Any]], rank: int, backend: Backend,
                     saved_size: int, size: int) -> list[Any] | None:
    """This process's share of the saved metric states."""
    if not backend.metrics_per_process or saved_size == size:
        key = f"metrics:{rank if backend.metrics_per_process else 0}"
        return arrays.get(key)
    # another number of processes: rank 0 starts from every row's sums, the others empty
    parts = [arrays.get(f"metrics:{r}", []) for r in range(saved_size)]
    summed = [sum(p) for p in zip(*parts)]
    return summed if rank == 0 else [a * 0 for a in summed]


def run_fit(core: Context, backend: Backend, policy: TrainingPolicy, hparams: HParams | None,
            model: Any, kwargs: dict[str, Any]) -> FitOutcome:
    """Train ``model`` as ``model.fit(**kwargs)`` would, resumed and recorded (see module)."""
    if not isinstance(model, keras.Model):
        raise ArgumentTypeError(f"context.fit: model must be a keras.Model, got "
                                f"{type(model).__name__}")
    if getattr(model, "optimizer", None) is None:
        raise UsageError("context.fit: compile the model first (model.compile(optimizer=...))")
    dist = core.distributed
    backend.check_optimizer(model, dist)
    if kwargs.pop("initial_epoch", 0):
        raise UsageError("context.fit: initial_epoch is det_sdk's to set (a resumed run "
                         "starts where its checkpoint left off): leave it out")
    callbacks = list(kwargs.pop("callbacks", None) or [])
    validation = _validation(kwargs)
    data = _data.split_xy(kwargs.pop("x", None), kwargs.pop("y", None),
                          kwargs.pop("sample_weight", None))
    split = kwargs.pop("validation_split", None)
    if split:
        data, validation = _validation_split(data, split, validation)
    batch_size = kwargs.pop("batch_size", None)
    epochs = kwargs.pop("epochs", 1)
    shuffle = kwargs.pop("shuffle", True)
    passed = {k: kwargs.pop(k) for k in PASSED if k in kwargs}
    if kwargs:
        raise UsageError(
            f"context.fit on {backend.name}: {', '.join(sorted(kwargs))} not supported; it "
            "takes x, y, batch_size, epochs, validation_data (or x_val, y_val), "
            f"validation_split, sample_weight, callbacks, shuffle, {', '.join(PASSED)}")
    warning = backend.determinism()
    if warning and dist.is_chief:
        log.warning(warning)
    state = _resume_state(core, backend)
    states = CallbackStates(callbacks)
    states.restore(state.saved_callbacks)
    state.callback_states = states
    callbacks = [states.before(), *callbacks, states]
    first = _data.EpochBatches.of(data, batch_size=batch_size, dist=dist, seed=policy.seed,
                                  shuffle=bool(shuffle), uneven=backend.uneven_rows)
    batches = first.batches_per_epoch
    lengths = _lengths(core, epochs, state, policy)
    history = keras.callbacks.History()
    history.set_model(model)
    driver: FitDriver | None = None
    early = False  # a callback (EarlyStopping) stopped the fit
    with catch_stop_signals() as stop_signal, _finalize_once(model) as finalized:
        for length in lengths:
            if early:
                break
            end = end_of(length, batches, None)
            stretches = plan((state.epoch, state.batch), end, batches)
            for i, stretch in enumerate(stretches):
                if early:
                    break
                x = _data.EpochBatches.of(data, batch_size=batch_size, dist=dist,
                                          seed=policy.seed, shuffle=bool(shuffle),
                                          epoch=stretch.epoch, first=stretch.first,
                                          last=stretch.last, uneven=backend.uneven_rows)
                driver = FitDriver(core=core, backend=backend, policy=policy, hparams=hparams,
                                   state=state, stretch=stretch, batches_per_epoch=batches,
                                   stop_reason=stop_signal, data=x,
                                   end_of_training=i == len(stretches) - 1)
                listed = DriverCallbacks(
                    callbacks, driver, add_history=True,
                    add_progbar=passed.get("verbose", "auto") != 0,
                    verbose=passed.get("verbose", "auto"), epochs=stretch.epochs_to,
                    steps=len(x), model=model)
                try:
                    fitted = model.fit(x, epochs=stretch.epochs_to,
                                       initial_epoch=stretch.epoch,
                                       validation_data=validation,
                                       shuffle=False,  # the batches' order is det_sdk's
                                       callbacks=listed, **passed)
                except Stopped as stop:
                    state.writer.wait()  # the stop's checkpoint written and reported
                    _fill(history, state, None)
                    return FitOutcome(history, state.position, stop)
                except BaseException:
                    with contextlib.suppress(Exception):
                        state.writer.wait()  # what was taken before the error stays
                    raise
                _fill(history, state, fitted)
                early = bool(model.stop_training)
    if early and driver is not None:
        # the weights EarlyStopping put back at the fit's end: the last checkpoint's
        state.checkpointed_at = -1
        driver.checkpoint(metrics=state.last_metrics)
    elif finalized[0] and driver is not None and _overwrites_weights(model.optimizer):
        # the weights are their averages now: the last checkpoint is of this model
        state.checkpointed_at = -1
        driver.checkpoint(metrics=state.last_metrics)
    state.writer.wait()
    return FitOutcome(history, state.position)


@contextlib.contextmanager
def _finalize_once(model: Any) -> Iterator[list[bool]]:
    """The optimizer's last word (``use_ema``: the weights overwritten by their moving
    averages) said once, when the whole ``context.fit`` has trained, not at the end of each
    of its ``model.fit`` calls: between two calls it would replace the weights the next
    call trains (and on JAX make a weight and its average one buffer, which the next step
    refuses to donate twice). Not said when training stops early: the process exits.
    Yields a flag, true once it was said."""
    optimizer = model.optimizer
    finalize = optimizer.finalize_variable_values
    optimizer.finalize_variable_values = lambda variables: None
    done = [False]
    try:
        yield done
        done[0] = True
    finally:
        del optimizer.finalize_variable_values  # the class's again
        if done[0]:
            finalize(model.trainable_weights)


def _overwrites_weights(optimizer: Any) -> bool:
    """Whether finalizing ``optimizer`` (or the one a loss-scale optimizer wraps) changed
    the weights."""
    inner = getattr(optimizer, "inner_optimizer", None)
    return bool(getattr(optimizer, "use_ema", False) or getattr(inner, "use_ema", False))


def _lengths(core: Context, epochs: Any, state: FitState, policy: TrainingPolicy) -> Any:
    """The lengths to train to: the searcher's operations, or the script's epochs.

    On the cluster each length trained is completed (its searcher metric reported) before
    the next is asked for; the next is the searcher's answer to that report (the master
    goes on answering a completed length to ``current_length()``)."""
    first = core.searcher.current_length()
    if first is not None:
        def ops() -> Any:
            length: Length | None = first
            while length is not None:
                yield length
                length = _complete(core, length, state, policy)
        return ops()
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 0:
        raise ArgumentTypeError(f"context.fit: epochs must be an int >= 0, got {epochs!r}")
    return [Length(epochs=epochs)] if epochs else []


def _complete(core: Context, length: Length, state: FitState,
              policy: TrainingPolicy) -> Length | None:
    """Report ``length`` trained with its searcher metric; the next length, or None.

    The length's checkpoint is reported first: the searcher may end the trial here."""
    state.writer.wait()
    return core.searcher.complete_from(
        length, state.last_validation, policy.searcher_metric, among="the validation metrics",
        hint="give context.fit validation_data, and name one of its metrics (val_...)")


def _fill(history: Any, state: FitState, fitted: Any) -> None:
    """The History of the whole run so far (resumed epochs included)."""
    history.history = {k: list(v) for k, v in state.history.items()}
    history.epoch = list(range(len(next(iter(state.history.values()), []))))
    if fitted is not None:
        history.params = fitted.params


