"""The callbacks ``context.fit`` injects: each one cross-cutting behaviour in a small class.

They share a :class:`Position` (epoch, batch within it, steps completed) that
``context.fit`` creates per call, so each callback knows where training is even
when a resumed run starts in the middle of an epoch.

>>> pos = Position(epoch=2, batch=0, steps_completed=200)
>>> pos.as_dict()
{'epoch': 2, 'batch': 0, 'steps_completed': 200}
"""

from __future__ import annotations

import itertools
import logging  # noqa: F401 (doctests)
import os
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from det_sdk.config import Length
from det_sdk.core._train import TrainContext
from det_sdk.distributed import Processes, SingleProcess  # noqa: F401 (doctests)
from det_sdk.engine.position import Position
from det_sdk.engine.stopping import StopAgreement
from det_sdk.errors import UsageError
from det_sdk.keras import _compat
from det_sdk.stages import DEFAULT_STAGE

__all__ = [
    "AggregateMetrics",
    "AverageStepOutputs",
    "BatchPeriodCheckpoint",
    "CheckInSync",
    "MetricsReporter",
    "PeriodicCheckpoint",
    "Preempted",
    "RecordHistory",
    "SequenceEpochEnd",
    "StopAt",
    "StopOnSignal",
    "TensorBoardScalars",
    "TrackPosition",
    "UndoPaddingMetrics",
    "WarnUnsavedRandomness",
    "aggregated_results",
    "chief_only_callbacks",
    "combine_logs",
    "periodic_checkpoint",
]


class _Callback(_compat.keras.callbacks.Callback):
    def __init__(self) -> None:
        super().__init__()
        # Our hooks never read the batch logs: let Keras skip converting them to
        # numpy on every batch (it does so for callbacks without this flag).
        self._supports_tf_logs = True


class TrackPosition(_Callback):
    """Keep ``position`` up to date; the first epoch may start at ``position.batch``.

    An epoch that ends early (``stop_training`` in the middle of it, as
    :class:`StopAt` does) leaves ``position`` in that epoch, so the next call
    continues it.

    >>> cb = TrackPosition(Position(epoch=0, batch=0, steps_completed=0))
    """

    def __init__(self, position: Position) -> None:
        super().__init__()
        self.position = position
        self._offset = position.batch  # batches already done in the first epoch

    def on_train_begin(self, logs: Any = None) -> None:
        self._offset = self.position.batch  # a new call may start mid-epoch

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        if epoch != self.position.epoch:
            self._offset = 0
        self.position.epoch = epoch
        self.position.batch = self._offset

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        done = self._offset + batch + 1  # steps_per_execution may skip indices
        self.position.steps_completed += done - self.position.batch
        self.position.batch = done

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        steps = self.params.get("steps") if self.params else None
        if steps is not None and self.position.batch - self._offset < steps:
            return  # stopped inside the epoch: the rest is still to come
        self.position.epoch = epoch + 1
        self.position.batch = 0
        self._offset = 0


class AverageMovingStatistics(_Callback):
    """With several processes: ``average()`` (every ``BatchNormalization``'s moving
    statistics made the processes' mean) before each validation and at each epoch's
    end, before the guard, the records and the checkpoint read them.

    >>> cb = AverageMovingStatistics(lambda: None)
    """

    def __init__(self, average: Callable[[], None]) -> None:
        super().__init__()
        self.average = average

    def on_test_begin(self, logs: Any = None) -> None:
        self.average()

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.average()


class CheckInSync(_Callback):
    """The divergence guard's hook: after the first step of a fit and at every epoch end.

    ``check(where, state)`` compares the processes' weights and raises if they differ:
    trainable ones after the first step, non-trainable state too at an epoch's end
    (after :class:`AverageMovingStatistics`).

    >>> cb = CheckInSync(lambda where, state: None, Position(0, 0, 0))
    """

    def __init__(self, check: Callable[[str, bool], None], position: Position) -> None:
        super().__init__()
        self.check = check
        self.position = position
        self._first_done = False

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if not self._first_done:
            self._first_done = True
            self.check(f"after step {self.position.steps_completed} (the first of this fit)",
                       False)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.check(f"at the end of epoch {epoch + 1}", True)


class RecordHistory(_Callback):
    """Append every epoch end's logs to one ``History`` for the whole run.

    ``context.fit`` makes several ``model.fit`` calls (planned mid-epoch ends,
    searcher lengths) and resumes from checkpoints: this one record, saved with
    every checkpoint and restored with it, is what ``fit`` returns, so
    ``hist.history["val_loss"][-1]`` is there after any resume, as in an
    uninterrupted run.

    >>> # RecordHistory(history): history.history and history.epoch grow at each epoch end
    """

    def __init__(self, history: Any) -> None:
        super().__init__()
        self.history = history

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.history.epoch.append(epoch)
        for k, v in (logs or {}).items():
            try:
                self.history.history.setdefault(k, []).append(float(v))
            except (TypeError, ValueError):
                continue


class SequenceEpochEnd(_Callback):
    """Call a ``keras.utils.Sequence``'s ``on_epoch_end()`` at each epoch end, as Keras does.

    ``context.fit`` feeds a Sequence through its own pipeline (see
    ``_data.sequence_pipeline``), so Keras no longer calls the hook itself.

    >>> # SequenceEpochEnd(my_sequence)
    """

    def __init__(self, seq: Any) -> None:
        super().__init__()
        self.seq = getattr(seq, "full", seq)  # a ShardedSequence's whole Sequence

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.seq.on_epoch_end()


def aggregated_results(model: Any, dist: Processes) -> dict[str, float]:
    """``model``'s metric results computed from the sum of every process's metric state.

    A collective: every process calls it at the same point. The metrics' state
    (totals and counts, confusion matrices, AUC's per-threshold counts) is summed
    over processes, the results are read from the sums, and each process's own
    state is put back. So every built-in metric (counts, precision, AUC, mean
    metrics) equals its value on the whole data, not a mean of per-process results.

    >>> aggregated_results(model, SingleProcess())  # doctest: +SKIP
    {'loss': 0.31, 'accuracy': 0.9}
    """
    variables = _compat.metric_variables(model)
    if dist.size == 1:
        return _compat.metric_results(model)
    mine = [v.numpy() for v in variables]
    every = dist.allgather(mine)
    if len({len(p) for p in every}) > 1:
        counts = ", ".join(f"rank {r}: {len(p)}" for r, p in enumerate(every))
        raise UsageError(
            f"det_sdk: the processes' models have different metric state ({counts} "
            "variables); compile the same metrics on every process, and train or evaluate "
            "on data for every process before reading metrics")
    try:
        for var, parts in zip(variables, zip(*every)):
            var.assign(np.sum(np.stack(parts).astype(np.float64), axis=0).astype(
                parts[0].dtype))
        return _compat.metric_results(model)
    finally:
        for var, own in zip(variables, mine):
            var.assign(own)


def combine_logs(
    logs: Mapping[str, Any], aggregated: Mapping[str, float], dist: Processes,
    weight: float = 1.0,
) -> dict[str, float]:
    """Every process's ``logs`` as one: metric results from ``aggregated``, others averaged.

    A collective. Values that do not come from metric state (what a custom
    ``train_step``/``test_step`` returns under its own names) are averaged over
    processes, weighted by ``weight`` (steps run). Keys come in the order of the
    first process that has any.

    >>> combine_logs({"loss": 0.5, "extra": 2.0}, {"loss": 0.4}, SingleProcess())
    {'loss': 0.4, 'extra': 2.0}
    """
    mine = _floats(logs)
    parts = dist.allgather((mine, float(weight))) if dist.size > 1 else [(mine, float(weight))]
    keys: list[str] = []
    for part, _ in parts:
        keys += [k for k in part if k not in keys]
    out: dict[str, float] = {}
    for k in keys:
        if k in aggregated:
            out[k] = float(aggregated[k])
            continue
        having = [(p[k], w) for p, w in parts if k in p]
        total = sum(w for _, w in having)
        out[k] = (sum(v * w for v, w in having) / total if total
                  else sum(v for v, _ in having) / len(having))
    return out


def _floats(logs: Mapping[str, Any]) -> dict[str, float]:
    out = {}
    for k, v in (logs or {}).items():
        try:
            out[k] = float(v)
        except (TypeError, ValueError):
            continue
    return out


class UndoPaddingMetrics(_Callback):
    """Undo the metric updates of the steps at which this process trains on padding only.

    A process left without rows in a batch still runs the step (the others wait
    for its gradients) on a padding row. Its gradients are zeroed before they are
    averaged (``_compat.gradient_share``: numpy batches carry no sample weights the
    user did not give, so the row itself is not weighted 0), and Keras's
    ``metrics`` would count it: their state is saved before such a step and put
    back after. Steps ``first`` and later of each epoch are padding.

    >>> cb = UndoPaddingMetrics(first=4, position=Position(0, 0, 0))
    """

    def __init__(self, first: int, position: Position) -> None:
        super().__init__()
        self.first = first
        self.position = position
        self._saved: list[Any] | None = None

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        if self.position.batch >= self.first:
            self._saved = [v.numpy() for v in _compat.metric_variables(self.model)]
            _compat.gradient_share().assign(0.0)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self._saved is not None:
            for var, value in zip(_compat.metric_variables(self.model), self._saved):
                var.assign(value)
            self._saved = None
            _compat.gradient_share().assign(1.0)

    def on_train_end(self, logs: Any = None) -> None:
        _compat.gradient_share().assign(1.0)  # a stop inside a padding step


class WarnUnsavedRandomness(_Callback):
    """Say once, after the first step of a ``fit`` (its step function traced), that the
    model draws random numbers whose state no checkpoint holds (TensorFlow's stateful
    ops: ``tf.random.normal``, Keras 2's ``backend.random_normal``): a resumed run is
    then not bit-equal to an uninterrupted one. One look at the traced graph.

    >>> cb = WarnUnsavedRandomness(logging.getLogger("det_sdk.keras"))
    """

    def __init__(self, logger: Any) -> None:
        super().__init__()
        self.logger = logger
        self._done = False

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self._done:
            return
        self._done = True
        try:
            ops = _compat.unsaved_random_ops(self.model)
        except Exception:  # a look at Keras's internals: it never fails training
            return
        if ops:
            names = ", ".join(f"{op} ({_compat.UNSAVED_RANDOM_OPS[op]})" for op in ops)
            self.logger.warning(
                "det_sdk: %s's training step draws random numbers with TensorFlow's stateful "
                "ops %s, whose state no checkpoint holds: a resumed run draws other numbers "
                "than an uninterrupted one (not bit-equal). To resume exactly, %s",
                type(self.model).__name__, names, _compat.UNSAVED_RANDOM_FIX)


class AverageStepOutputs(_Callback):
    """Values a custom ``test_step`` returns that are not Keras metrics (plain tensors
    under its own names): their mean over the batches, weighted by each batch's rows,
    over every process's batches. Keras itself logs the last batch's value, which
    differs between 1 and N processes; this is the same on any number of processes
    (for a per-batch mean, the value over the whole validation data).

    ``rows(i)``: the rows of batch ``i`` (numpy validation data); without it every
    batch weighs the same (datasets, Sequences). In ``fit`` the validation logs
    (``val_<name>``) are replaced at the epoch end; ``evaluate`` calls
    :meth:`combined` itself.

    >>> cb = AverageStepOutputs(SingleProcess())
    """

    def __init__(self, dist: Processes,
                 rows: Callable[[int], float] | None = None) -> None:
        super().__init__()
        self.dist, self.rows = dist, rows
        self._sums: dict[str, float] = {}
        self._weight = 0.0
        self._result: dict[str, float] | None = None
        self._active = False

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self._result = None

    def on_test_begin(self, logs: Any = None) -> None:
        self._sums, self._weight = {}, 0.0
        # Keras's own test_step returns metrics only: nothing to read per batch
        self._active = _compat.overrides_test_step(self.model)

    def on_test_batch_end(self, batch: int, logs: Any = None) -> None:
        if not self._active:
            return
        w = float(self.rows(batch)) if self.rows is not None else 1.0
        for k, v in _floats(logs).items():
            self._sums[k] = self._sums.get(k, 0.0) + v * w
        self._weight += w

    def on_test_end(self, logs: Any = None) -> None:
        # Keras's own test_step: no outputs of its own to average, and no metric results
        # to read for their names (0.4 ms a validation). The same answer on every process,
        # so the collective in combined() is skipped by all or by none.
        self._result = self.combined(self.model) if self._active else None

    def combined(self, model: Any) -> dict[str, float]:
        """The weighted means of the non-metric outputs over all processes (a collective)."""
        metrics = set(_compat.metric_results(model))
        mine = ({k: v for k, v in self._sums.items() if k not in metrics}, self._weight)
        parts = self.dist.allgather(mine) if self.dist.size > 1 else [mine]
        total = sum(w for _, w in parts)
        keys = {k for p, _ in parts for k in p}
        return {k: sum(p.get(k, 0.0) for p, _ in parts) / total for k in keys} if total else {}

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if logs is not None and self._result:
            logs.update({f"val_{k}": v for k, v in self._result.items() if f"val_{k}" in logs})


class AggregateMetrics(_Callback):
    """Make each epoch's logs the metrics of all processes' data, before anyone reads them.

    Training metrics are read from the summed metric state just before validation
    resets it (``on_test_begin``), or at the epoch end without validation;
    validation metrics at the end of validation (``on_test_end``). See
    :func:`aggregated_results`. Mutates the epoch logs in place, so History, the
    reporters and user callbacks all see the whole data's metrics.

    >>> cb = AggregateMetrics(SingleProcess())
    """

    def __init__(self, dist: Processes) -> None:
        super().__init__()
        self.dist = dist
        self._train: dict[str, float] | None = None
        self._val: dict[str, float] | None = None
        self._val_steps = 0

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self._train = self._val = None
        self._val_steps = 0

    def on_test_begin(self, logs: Any = None) -> None:
        # Validation is about to reset the metrics: their training state is read now.
        self._train = aggregated_results(self.model, self.dist)

    def on_test_batch_end(self, batch: int, logs: Any = None) -> None:
        self._val_steps += 1

    def on_test_end(self, logs: Any = None) -> None:
        self._val = aggregated_results(self.model, self.dist)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if logs is None:
            return
        train_agg = self._train if self._train is not None else aggregated_results(
            self.model, self.dist)
        train = {k: v for k, v in logs.items() if not k.startswith("val_")}
        val = {k.removeprefix("val_"): v for k, v in logs.items() if k.startswith("val_")}
        logs.update(combine_logs(train, train_agg, self.dist))
        if self._val is not None or val:
            combined = combine_logs(val, self._val or {}, self.dist, weight=self._val_steps)
            logs.update({f"val_{k}": v for k, v in combined.items()})


def _file_writing_callbacks() -> tuple[type, ...]:
    cbs = _compat.keras.callbacks
    names = ("ModelCheckpoint", "CSVLogger", "TensorBoard", "BackupAndRestore")
    return tuple(getattr(cbs, n) for n in names if hasattr(cbs, n))


def chief_only_callbacks(callbacks: list[Any], dist: Processes) -> list[Any]:
    """The user's callbacks this process runs: all on rank 0; elsewhere, not those that
    write files (``ModelCheckpoint``, ``CSVLogger``, ``TensorBoard``,
    ``BackupAndRestore``, and subclasses), which would write the same files N times.

    Callbacks that decide something (``EarlyStopping``, ``ReduceLROnPlateau``,
    ``LearningRateScheduler``) run everywhere: they read the same aggregated metrics
    on every process and so decide the same.

    >>> chief_only_callbacks(["any"], SingleProcess())
    ['any']
    """
    if dist.is_chief:
        return list(callbacks)
    writers = _file_writing_callbacks()
    return [cb for cb in callbacks if not isinstance(cb, writers)]


class PeriodicCheckpoint(_Callback):
    """Save a checkpoint every ``period`` epochs through ``save()`` (see
    :func:`periodic_checkpoint` for a period in batches).

    >>> cb = PeriodicCheckpoint(Length(epochs=1), Position(0, 0, 0), save=lambda: None)
    """

    def __init__(self, period: Length, position: Position, save: Callable[[], Any]) -> None:
        super().__init__()
        self.period = period
        self.position = position
        self.save = save

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        # position (updated by TrackPosition before us) says whether the epoch is complete
        done = self.position.batch == 0 and self.position.epoch == epoch + 1
        if self.period.epochs and done and self.position.epoch % self.period.epochs == 0:
            self.save()


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

    >>> cb = BatchPeriodCheckpoint(Length(batches=50), Position(0, 0, 0), save=lambda: None)
    """

    def __init__(self, period: Length, position: Position, save: Callable[[], Any]) -> None:
        super().__init__(period, position, save)
        self._due_at_epoch_end = False

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self.position.steps_completed % self.period.value == 0:  # value: the batches
            if last_batch_of_epoch(self, batch):
                self._due_at_epoch_end = True
            else:
                self.save()

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if self._due_at_epoch_end:
            self._due_at_epoch_end = False
            self.save()


def periodic_checkpoint(period: Length, position: Position, save: Callable[[], Any]
                        ) -> PeriodicCheckpoint:
    """The checkpoint callback for ``period``: per epochs, or per batches.

    >>> type(periodic_checkpoint(Length(batches=5), Position(0, 0, 0), lambda: None)).__name__
    'BatchPeriodCheckpoint'
    """
    cls = BatchPeriodCheckpoint if period.batches else PeriodicCheckpoint
    return cls(period, position, save)


class Preempted(Exception):
    """Raised out of ``model.fit`` once a checkpoint is saved after a stop request.

    Control flow, not an error, and so the one exception class of det_sdk outside
    :class:`det_sdk.errors.DetSdkError` (tests/unit/test_errors.py lists it): it carries a
    preemption that went right (checkpoint saved) from a callback out through Keras's
    ``fit`` to ``context.fit``, which catches it. In the error tree, a handler written
    ``except DetSdkError`` (a user's, or the ``det`` CLI's) would take a clean stop for a
    failure.
    """

    def __init__(self, reason: str, uuid: str | None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.uuid = uuid


class StopOnSignal(_Callback):
    """After the current batch, checkpoint and leave ``fit`` when asked to stop.

    ``agreement``: the processes' decision (:class:`det_sdk.engine.stopping.
    StopAgreement`: a signal, the master's request; with several processes a
    collective, so that all stop at the same batch and take the checkpoint, itself
    collective, together), asked every ``every`` batches and at each epoch end.

    >>> from det_sdk.engine.stopping import StopAgreement
    >>> class Master:
    ...     def requested(self): return False
    >>> agreement = StopAgreement(SingleProcess(), Master(), lambda: None)
    >>> cb = StopOnSignal(agreement, save=lambda: "uuid")
    """

    def __init__(
        self,
        agreement: StopAgreement,
        save: Callable[[], str | None],
        every: int = 1,
    ) -> None:
        super().__init__()
        self.agreement = agreement
        self.save = save
        self.every = every
        self._batches = 0

    def _check(self) -> None:
        reason = self.agreement.decide()
        if reason:
            raise Preempted(reason, self.save())

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self._batches += 1
        if self._batches % self.every == 0 and not last_batch_of_epoch(self, batch):
            self._check()

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self._check()


def split_logs(logs: Mapping[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    """Keras epoch logs -> (training metrics, validation metrics)."""
    train: dict[str, float] = {}
    val: dict[str, float] = {}
    for k, v in logs.items():
        try:
            value = float(v)
        except (TypeError, ValueError):
            continue
        (val if k.startswith("val_") else train)[k] = value
    return train, val


class MetricsReporter(_Callback):
    """Report training and validation metrics, and progress, through ``det.core``'s
    ``train`` context, as those of ``stage`` (det_sdk.stages; ``searched``: the stage the
    searcher's length applies to, whose progress is the trial's).

    At each epoch end (or early end of a call): the epoch's training averages and
    any validation. Every ``report_every`` batches in between: the running
    averages of the epoch so far, averaged over all processes (a collective, so
    every process runs this callback; only the one with ``publish`` reports).
    Remembers the last validation and where it was taken.

    >>> # MetricsReporter(core.train, position, dist, publish=dist.is_chief), from context.fit
    """

    def __init__(self, train: TrainContext, position: Position, dist: Processes,
                 *, publish: bool = True, report_every: int | None = None,
                 total_steps: int | None = None, stage: str = DEFAULT_STAGE,
                 searched: bool = True) -> None:
        super().__init__()
        self.train = train
        self.stage, self.searched = stage, searched
        self.position = position
        self.dist = dist
        self.publish = publish
        self.report_every = report_every
        self.total_steps = total_steps
        self.last_validation: dict[str, float] = {}
        self.last_validation_steps: int | None = None

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        steps = self.position.steps_completed
        if not self.report_every or steps % self.report_every or not logs:
            return
        train, _ = split_logs(logs)  # converting the logs waits for this batch: rare
        if self.dist.size > 1:
            parts = self.dist.allgather(train)
            train = {k: sum(p[k] for p in parts) / len(parts) for k in train}
        if self.publish and train:
            self.report("training", steps, train)
            self._progress()

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        train, val = split_logs(logs or {})
        steps = self.position.steps_completed
        if val:
            self.last_validation, self.last_validation_steps = val, steps
        if not self.publish:
            return
        if train:
            self.report("training", steps, train)
        if val:
            self.report("validation", steps, val)
        self._progress()

    def report(self, group: str, steps: int, metrics: Mapping[str, float]) -> None:
        """Report ``metrics`` of ``group`` at ``steps``, in this epoch, as this stage's."""
        self.train.report_metrics(group, steps, metrics, self.position.epoch,
                                  stage=self.stage, searched=self.searched)

    def _progress(self) -> None:
        if self.total_steps:
            self.train.report_progress(self.position.steps_completed / self.total_steps,
                                       searched=self.searched)


class StopAt(_Callback):
    """End the ``model.fit`` call once ``position`` reaches ``(epoch, batch)``.

    Keras then ends the epoch early as usual, validation included.

    >>> cb = StopAt(Position(0, 0, 0), (2, 5))
    """

    def __init__(self, position: Position, at: tuple[int, int]) -> None:
        super().__init__()
        self.position = position
        self.at = at

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if (self.position.epoch, self.position.batch) >= self.at:
            self.model.stop_training = True


class ScalarEventFile:
    """A TensorBoard event file of scalars, written record by record without TF ops.

    ``tf.summary.write`` runs eager ops (a writer resource, a constant, the write)
    and cost about 3.5 ms per epoch here; an ``Event`` protocol buffer appended
    through ``tf.io.TFRecordWriter`` (C++, no graph, no ops) costs tens of
    microseconds and gives TensorBoard the same records. The ``tensorboard``
    package, which TF >= 2.16 no longer installs, is not needed.

    >>> # f = ScalarEventFile(Path("det-runs/1/tensorboard/train")); f.add(64, {"loss": 0.3})
    """

    def __init__(self, logdir: Path) -> None:
        from tensorflow.core.framework import summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
        from tensorflow.core.util import event_pb2

        self._summary_pb2, self._event_pb2 = summary_pb2, event_pb2
        self._tensor_pb2, self._float32 = tensor_pb2, types_pb2.DT_FLOAT
        self._scalar_shape = tensor_shape_pb2.TensorShapeProto()
        self._metadata = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
            data_class=summary_pb2.DATA_CLASS_SCALAR,
        )
        logdir.mkdir(parents=True, exist_ok=True)
        # TensorBoard reads any file whose name holds "tfevents"; this is its own pattern
        name = (f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}."
                f"{os.getpid()}.{next(_event_files)}.v2")
        self._records = tf.io.TFRecordWriter(str(logdir / name))
        self._append(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))

    def _append(self, event: Any) -> None:
        self._records.write(event.SerializeToString())

    def add(self, step: int, scalars: Mapping[str, float]) -> None:
        """Append one event with these scalars at ``step`` and flush it to the file."""
        pb = self._summary_pb2
        # a scalar float32 TensorProto built directly: tf.make_tensor_proto (numpy and
        # type checks) cost 15 us a value, a third of the whole record
        values = [
            pb.Summary.Value(tag=tag, metadata=self._metadata, tensor=self._tensor_pb2.TensorProto(
                dtype=self._float32, tensor_shape=self._scalar_shape, float_val=[float(value)]))
            for tag, value in scalars.items()
        ]
        self._append(self._event_pb2.Event(wall_time=time.time(), step=step,
                                           summary=pb.Summary(value=values)))
        self._records.flush()

    def close(self) -> None:
        self._records.close()


_event_files = itertools.count()


class TensorBoardScalars(_Callback):
    """Write each epoch's metrics as TensorBoard scalars (step = batches trained).

    Lighter than ``keras.callbacks.TensorBoard``: no graph, no histograms, one
    record per epoch.

    >>> # TensorBoardScalars(Path("det-runs/1/tensorboard"), position)
    """

    def __init__(self, logdir: Path, position: Position) -> None:
        super().__init__()
        self.logdir = logdir
        self.position = position
        self._files: dict[str, ScalarEventFile] = {}

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        train, val = split_logs(logs or {})
        for name, metrics in (("train", train), ("validation", val)):
            if not metrics:
                continue
            if name not in self._files:
                self._files[name] = ScalarEventFile(self.logdir / name)
            self._files[name].add(self.position.steps_completed,
                                  {k.removeprefix("val_"): v for k, v in metrics.items()})

    def on_train_end(self, logs: Any = None) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()


