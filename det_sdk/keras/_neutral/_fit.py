"""``context.fit`` on JAX and PyTorch: ``model.fit`` calls that start and end where the run
needs, and det_sdk's callbacks in them.

A fit trains from where the run's latest checkpoint left off to the end of its length
(the script's ``epochs`` locally; the searcher's lengths on the cluster). Keras's
``model.fit`` runs whole epochs of a fixed number of batches, so :func:`plan` cuts the
stretch into calls: the rest of an epoch a resume starts inside, whole epochs, and the
part of an epoch a searcher length ends in. :class:`FitDriver`, a Keras callback in each
call, counts the batches and at the points the policy names reports metrics, writes
checkpoints, and agrees with the other processes to stop (a signal, the master's pause):
it then checkpoints and ends the call (:class:`Stopped`).

A checkpoint holds the model, the optimizer, each process's random state and, taken
inside an epoch, each process's metric states: the resumed epoch's first ``model.fit``
starts its metrics from them, so its History row is the uninterrupted run's.

>>> [(s.epoch, s.first, s.last, s.epochs_to) for s in plan((0, 3), (2, 0), 5)]
[(0, 3, 5, 1), (1, 0, 5, 2)]
>>> [(s.epoch, s.first, s.last, s.epochs_to) for s in plan((0, 0), (1, 2), 5)]
[(0, 0, 5, 1), (1, 0, 2, 2)]
"""

from __future__ import annotations

import copy
import time
import uuid as uuidlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import keras
import numpy as np

from det_sdk.config import Length
from det_sdk.core._context import Context
from det_sdk.engine.policy import TrainingPolicy
from det_sdk.engine.position import Position
from det_sdk.engine.stopping import StopAgreement
from det_sdk.engine.writer import CheckpointWriter
from det_sdk.errors import UsageError
from det_sdk.hparams import HParams
from det_sdk.keras._neutral import _state
from det_sdk.keras._neutral._backend import Backend
from det_sdk.keras._neutral._tensorboard import EpochScalars

__all__ = ["DriverCallbacks", "FitDriver", "FitState", "Stopped", "Stretch", "plan"]

# With several processes, how often (in batches) they agree whether to stop
STOP_CHECK_EVERY = 10


class Stopped(Exception):
    """A fit stopped early (a signal, the master): its checkpoint is saved.

    Control flow, as the TensorFlow engine's ``Preempted``, and so outside
    :class:`det_sdk.errors.DetSdkError` (tests/e2e/test_errors.py lists both): raised from
    the callback out through Keras's ``fit`` to ``context.fit``, which catches it; a handler
    written ``except DetSdkError`` would take a clean stop for a failure.
    """

    def __init__(self, reason: str, uuid: str | None, position: Position) -> None:
        super().__init__(reason)
        self.reason, self.uuid, self.position = reason, uuid, position


@dataclass(frozen=True)
class Stretch:
    """One ``model.fit`` call: ``initial_epoch=epoch``, ``epochs=epochs_to``; its first
    epoch trains batches ``first`` to ``last``, the others whole."""

    epoch: int
    first: int
    last: int
    epochs_to: int


def plan(start: tuple[int, int], end: tuple[int, int], batches: int) -> list[Stretch]:
    """The calls from ``start`` (epoch, batch) to ``end`` (epoch, batch), ``batches`` per
    epoch: ``end = (2, 0)`` ends after two whole epochs."""
    epoch, batch = start
    if batch >= batches:
        epoch, batch = epoch + 1, 0
    out = []
    while (epoch, batch) < end:
        if batch > 0 or epoch == end[0]:
            last = batches if epoch < end[0] else end[1]
            out.append(Stretch(epoch, batch, last, epoch + 1))
            epoch, batch = (epoch + 1, 0) if last == batches else (epoch, last)
        else:
            out.append(Stretch(epoch, 0, batches, end[0]))
            epoch = end[0]
    return out


@dataclass
class FitState:
    """Where the fit is and what it has recorded, carried across its ``model.fit`` calls."""

    epoch: int = 0
    batch: int = 0
    steps_completed: int = 0
    history: dict[str, list[float]] = field(default_factory=dict)
    #: this process's metric states to start the resumed epoch from
    carried_metrics: list[np.ndarray] | None = None
    #: arrays to restore at the first call's start: group -> arrays
    restore: dict[str, list[np.ndarray]] | None = None
    restore_path: Path | None = None
    last_checkpoint: str | None = None
    last_validation: dict[str, float] = field(default_factory=dict)
    last_metrics: dict[str, float] = field(default_factory=dict)  # the latest epoch's
    #: the position of the latest checkpoint (none taken twice at one place)
    checkpointed_at: int = -1
    #: writes checkpoints off the training thread, one at a time
    writer: CheckpointWriter = field(default_factory=CheckpointWriter)
    #: ``model.json``'s bytes, made at the fit's first checkpoint (the model's
    #: architecture and compile config do not change while it trains)
    model_spec: bytes | None = None
    #: the script's callbacks' state (``_callbacks.CallbackStates``), saved with each checkpoint
    callback_states: Any = None
    #: the resumed checkpoint's ``"callbacks"`` entry
    saved_callbacks: Any = None

    @property
    def position(self) -> Position:
        return Position(self.epoch, self.batch, self.steps_completed)


def _floats(logs: Any) -> dict[str, float]:
    out = {}
    for k, v in dict(logs or {}).items():
        try:
            out[k] = float(np.asarray(keras.ops.convert_to_numpy(v)))
        except (TypeError, ValueError):
            continue
    return out


class FitDriver(keras.callbacks.Callback):
    """det_sdk's callback in each ``model.fit`` call of a ``context.fit`` (see the module)."""

    def __init__(self, *, core: Context, backend: Backend, policy: TrainingPolicy,
                 hparams: HParams | None, state: FitState, stretch: Stretch,
                 batches_per_epoch: int, stop_reason: Any, end_of_training: bool,
                 data: Any = None) -> None:
        super().__init__()
        self.core, self.backend, self.policy, self.hparams = core, backend, policy, hparams
        self.dist = core.distributed
        self.state, self.stretch = state, stretch
        self.batches = batches_per_epoch
        self.end_of_training = end_of_training
        self.data = data  # the call's EpochBatches
        logdir = core.tensorboard_dir if self.dist.is_chief else None
        self.board = EpochScalars(logdir) if logdir is not None else None
        self.agreement = StopAgreement(self.dist, core.preempt, stop_reason)
        self._epoch_metrics: dict[str, float] | None = None  # training's, at the epoch's end
        self._metric_arrays: list[np.ndarray] | None = None  # at the last batch of a call
        self._pending_random: list[np.ndarray] | None = None  # restored at the next batch
        # the profiler's per-batch timer (det_sdk.profiler): Keras fetches a batch inside
        # its step, so a step's time includes its data's wait
        self._timer = core.batch_timer

    # --- Keras's hooks -------------------------------------------------------------------

    def on_train_begin(self, logs: Any = None) -> None:
        st = self.state
        if st.restore is not None:
            self._restore(st.restore, st.restore_path)
            st.restore = None
        elif st.steps_completed == 0 and self.dist.size > 1:
            self._start_alike()

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        if self.data is not None:
            self.data.set_epoch(epoch)
        if self.state.carried_metrics is not None:
            _state.apply_arrays(self.model.metrics_variables, self.state.carried_metrics,
                                "metrics", Path("."))
            self.state.carried_metrics = None

    def on_train_end(self, logs: Any = None) -> None:
        if self.board is not None:
            self.board.close()

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        if self._timer is not None:
            self._timer.batch_start()
        if self.dist.size > 1 and self.data is not None:
            self.backend.step_rows(self.model, self.dist, self.data.global_rows(self.state.batch))
        if self._pending_random is not None:
            self.backend.set_random_state(self._pending_random)
            self._pending_random = None

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self._timer is not None:
            self._timer.step_end()
        st = self.state
        st.batch += 1
        st.steps_completed += 1
        last_of_call = st.batch == (self.stretch.last if st.epoch == self.stretch.epoch
                                    else self.batches)
        if last_of_call or st.batch == self.batches:
            self.backend.sync(self.model)
            self._metric_arrays = [_state._host(v.value, copy=True)
                                   for v in self.model.metrics_variables]
            self._epoch_metrics = self._training_metrics(logs)
        every = self.policy.report_every
        if every and st.steps_completed % every == 0 and st.batch < self.batches:
            metrics = self._epoch_metrics if last_of_call else self._training_metrics(logs)
            self._report("training", metrics)
        period = self.policy.checkpoint_period
        if period is not None and period.batches and \
                st.steps_completed % period.batches == 0 and not last_of_call:
            self.checkpoint()
        # at a call's last batch, the stop is decided after its validation (on_epoch_end)
        if not last_of_call and (self.dist.size == 1
                                 or st.steps_completed % STOP_CHECK_EVERY == 0):
            self._stop_if_asked()

    def _stop_if_asked(self) -> None:
        reason = self.agreement.decide()
        if reason is not None:
            uuid = self.checkpoint()
            raise Stopped(reason, uuid, self.state.position)

    def epoch_logs(self, logs: Any) -> None:
        """Put the epoch's training metrics over every process's rows into ``logs``,
        before the script's callbacks and the History read them."""
        if logs is not None and self._epoch_metrics is not None:
            logs.update(self._epoch_metrics)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        st = self.state
        logs = logs if logs is not None else {}
        self.epoch_logs(logs)
        values = _floats(logs)
        train = {k: v for k, v in values.items() if not k.startswith("val_")}
        val = {k: v for k, v in values.items() if k.startswith("val_")}
        if train:
            self._report("training", train)
        if val:
            st.last_validation = val
            self._report("validation", val)
        self._progress()
        st.last_metrics = values
        whole = st.batch == self.batches
        if whole:  # a call that ends inside an epoch (a searcher length) records no row
            for k, v in values.items():
                st.history.setdefault(k, []).append(v)
            if self.board is not None:
                self.board.add(st.steps_completed, values)
            st.epoch, st.batch = epoch + 1, 0
        period = self.policy.checkpoint_period
        due = period is not None and period.epochs and whole and (epoch + 1) % period.epochs == 0
        at_end = whole and epoch + 1 == self.stretch.epochs_to and self.end_of_training
        if due or at_end or not whole:  # the live metric states are validation's now
            self.checkpoint(metrics=values, metric_arrays=self._metric_arrays)
        self._stop_if_asked()

    # --- the parts ---------------------------------------------------------------------

    def _training_metrics(self, logs: Any) -> dict[str, float]:
        """The epoch's training metrics so far over every process's rows."""
        if not (self.backend.metrics_per_process and self.dist.size > 1):
            return {k: v for k, v in _floats(logs).items() if not k.startswith("val_")}
        variables = self.model.metrics_variables
        own = [_state._host(v.value, copy=True) for v in variables]  # not views
        every = self.dist.allgather(own)
        summed = [np.sum(np.stack(parts), axis=0).astype(parts[0].dtype)
                  for parts in zip(*every)]
        for v, arr in zip(variables, summed):
            v.assign(arr)
        try:
            return _floats(self.model.get_metrics_result())
        finally:
            for v, arr in zip(variables, own):
                v.assign(arr)

    def _report(self, group: str, metrics: dict[str, float] | None) -> None:
        if metrics and self.dist.is_chief:
            self.core.train.report_metrics(group, self.state.steps_completed, metrics,
                                           self.state.epoch)

    def _progress(self) -> None:
        total = self.policy.max_length
        if total is not None and self.dist.is_chief:
            steps = total.batches or (total.epochs or 0) * self.batches
            if steps:
                self.core.train.report_progress(min(1.0, self.state.steps_completed / steps))

    def _start_alike(self) -> None:
        """Every process starts from rank 0's weights (its initialisers drew the same
        values from the same seed; this makes sure), with its own random state."""
        own = [_state._host(v.value) for v in self.model.weights]
        values: list[np.ndarray] = self.dist.broadcast(own if self.dist.is_chief else [])
        for v, arr in zip(self.model.weights, values):
            v.assign(arr)
        self.backend.seed_rank(self.model, self.dist)

    def _restore(self, arrays: dict[str, list[np.ndarray]], path: Path | None) -> None:
        where = path or Path(".")
        model = self.model
        _state.apply_arrays(model.weights, arrays.get("model", []), "model", where)
        opt = _state.optimizer_of(model)
        if opt is not None and arrays.get("optimizer:0"):
            _state.apply_arrays(opt.variables, arrays["optimizer:0"], "optimizer", where)
        saved = arrays.get(f"rng:{self.dist.rank}")
        own = saved is not None
        # more processes than the checkpoint had: rank 0's, made this rank's
        rng: list[np.ndarray] = saved if saved is not None else arrays.get("rng:0", [])
        generators = _state.rng_variables(model)
        _state.apply_arrays(generators, rng[:len(generators)], "rng", where)
        backend_random = list(rng[len(generators):])
        if self.state.batch:
            # Inside an epoch: at its first batch. Keras makes the epoch's data iterator
            # between here and there, and PyTorch's draws a seed from the global generator
            # as it starts, a draw the uninterrupted run made before this checkpoint.
            self._pending_random = backend_random
        else:
            self.backend.set_random_state(backend_random)
        if not own:
            self.backend.seed_rank(model, self.dist)

    def checkpoint(self, metrics: dict[str, float] | None = None,
                   metric_arrays: list[np.ndarray] | None = None) -> str | None:
        """Save the state now, as of the current position; its uuid on the chief.

        Inside an epoch the metric states go with it: the live ones, or
        ``metric_arrays`` (read at the epoch's last batch trained) after a validation."""
        st = self.state
        if st.checkpointed_at == st.steps_completed:
            return st.last_checkpoint
        began = time.perf_counter()
        try:
            return self._checkpoint(metrics, metric_arrays)
        finally:
            if self._timer is not None:  # training waited this long (the write is behind)
                self._timer.checkpoint_blocked(time.perf_counter() - began)

    def _checkpoint(self, metrics: dict[str, float] | None,
                    metric_arrays: list[np.ndarray] | None) -> str | None:
        st = self.state
        self.backend.sync(self.model)
        rng, live_metrics = _state.own_arrays(self.model, self.backend.random_state())
        mid_epoch = 0 < st.batch < self.batches
        own_metrics = (metric_arrays if metric_arrays is not None else live_metrics) \
            if mid_epoch else []
        own = (rng, own_metrics)
        every = self.dist.allgather(own) if self.dist.size > 1 else [own]
        st.checkpointed_at = st.steps_completed
        if not self.dist.is_chief:
            return None
        arrays = _state.state_arrays(self.model, copy=self.backend.updates_in_place)
        for r, (r_rng, r_metrics) in enumerate(every):
            arrays += [(f"rng:{r}", f"rng/{i}", a) for i, a in enumerate(r_rng)]
            arrays += [(f"metrics:{r}", f"metrics/{i}", a) for i, a in enumerate(r_metrics)]
        metadata = {
            **st.position.as_dict(),
            "seed": self.policy.seed,
            "hparams": self.hparams.to_dict() if self.hparams is not None else {},
            "metrics": dict(metrics or {}),
            "trial_id": self.core.run_id,
            "processes": self.dist.size,
            "keras_backend": self.backend.name,
            "created": time.time(),
            "history": copy.deepcopy(st.history),
        }
        if st.callback_states is not None:
            metadata["callbacks"] = st.callback_states.collect()
        if st.model_spec is None:
            st.model_spec = _state.model_json(self.model)
        spec = st.model_spec
        uuid = str(uuidlib.uuid4())
        record = {**st.position.as_dict(), "metrics": dict(metrics or {}),
                  "keras_backend": self.backend.name}
        checkpoint = self.core.checkpoint
        backend = self.backend.name

        def write() -> Any:  # in the writer's thread; returns the publish (upload, report)
            return checkpoint.write_staged(uuid, lambda path: {
                **record, "size": _state.write_checkpoint(path, arrays, spec, metadata,
                                                          backend)})

        st.writer.submit(write)
        st.last_checkpoint = uuid
        return uuid


class DriverCallbacks(keras.callbacks.CallbackList):
    """Keras's list of the script's callbacks (with the History and the progress bar, each
    batch's dispatched in the background where Keras judges them safe), and det_sdk's
    :class:`FitDriver` called on the training thread with each step's logs as they come.

    A callback of the list's own that overrides a batch hook makes Keras wait for every
    step and convert its logs (measured on JAX: ``model.fit`` 1.57 s, 2.49 s with an empty
    ``on_train_batch_end``); the driver reads the logs only where it reports.
    """

    def __init__(self, callbacks: list[Any], driver: FitDriver, **kwargs: Any) -> None:
        self.driver = driver  # first: Keras's __init__ calls set_model
        super().__init__(callbacks, **kwargs)
        #: whether this call's end is the fit's (the last call, or a callback stopped it)
        self.ends_fit = driver.end_of_training

    def set_model(self, model: Any) -> None:
        super().set_model(model)
        self.driver.set_model(model)

    def on_train_begin(self, logs: Any = None) -> None:
        self.driver.on_train_begin(logs)
        super().on_train_begin(logs)

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.driver.on_epoch_begin(epoch, logs)
        super().on_epoch_begin(epoch, logs)

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.driver.on_train_batch_begin(batch, logs)
        super().on_train_batch_begin(batch, logs)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        super().on_train_batch_end(batch, logs)
        self.driver.on_train_batch_end(batch, logs)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.driver.epoch_logs(logs)
        super().on_epoch_end(epoch, logs)
        self.driver.on_epoch_end(epoch, logs)

    def on_train_end(self, logs: Any = None) -> None:
        ends = self.ends_fit or bool(getattr(self.model, "stop_training", False))
        # EarlyStopping(restore_best_weights=True) puts the best epoch's weights back at
        # every model.fit's end: only at the end of the whole fit, as one model.fit would
        held = [] if ends else [cb for cb in self.callbacks
                                if isinstance(cb, keras.callbacks.EarlyStopping)
                                and cb.restore_best_weights]
        for cb in held:
            cb.restore_best_weights = False
        try:
            super().on_train_end(logs)
        finally:
            for cb in held:
                cb.restore_best_weights = True
        self.driver.on_train_end(logs)


def end_of(length: Length, batches: int, global_batch: int | None) -> tuple[int, int]:
    """Where a training ``length`` ends: (whole epochs, batches of the next)."""
    if length.epochs is not None:
        return length.epochs, 0
    total = length.batches or 0
    return divmod(total, batches)


def check_resumable(meta: dict[str, Any], backend: str) -> None:
    """Refuse to resume a run trained on another backend (its state would not carry)."""
    saved = meta.get("keras_backend") or meta.get("framework", {}).get("keras_backend") \
        or "tensorflow"
    if saved != backend:
        raise UsageError(
            f"this run's latest checkpoint was trained on Keras's {saved} backend and this "
            f"process runs {backend}: resume it with KERAS_BACKEND={saved}, or start a new "
            f"run (load its weights with context.load_checkpoint_model)")
