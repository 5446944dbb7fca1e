"""N processes that train as one: their metrics from all processes' data, moving
statistics averaged, the divergence guard, padding steps undone, files written once.

>>> from det_sdk.distributed import SingleProcess
>>> chief_only_callbacks(["any"], SingleProcess())
['any']
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from det_sdk.distributed import Processes, SingleProcess  # noqa: F401 (doctests)
from det_sdk.errors import UsageError
from det_sdk.keras import _compat
from det_sdk.keras._callbacks._base import DetCallback
from det_sdk.keras._fit_run import FitRun

__all__ = ["AggregateMetrics", "AverageMovingStatistics", "AverageStepOutputs", "CheckInSync",
           "UndoPaddingMetrics", "aggregated_results", "chief_only_callbacks", "combine_logs"]


class AverageMovingStatistics(DetCallback):
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


class CheckInSync(DetCallback):
    """The divergence guard's hook: after the first step of a fit and at every epoch end.

    ``check(where, state)`` compares the processes' weights and raises if they differ:
    trainable ones after the first step, non-trainable state too at an epoch's end
    (after :class:`AverageMovingStatistics`).

    >>> cb = CheckInSync(lambda where, state: None, FitRun(None, None, checkpoints=False))
    """

    def __init__(self, check: Callable[[str, bool], None], run: FitRun) -> None:
        super().__init__()
        self.check = check
        self.run = run
        self._first_done = False

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if not self._first_done:
            self._first_done = True
            self.check(f"after step {self.run.steps_completed} (the first of this fit)",
                       False)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.check(f"at the end of epoch {epoch + 1}", True)


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


class UndoPaddingMetrics(DetCallback):
    """Undo the metric updates of the steps at which this process trains on padding only.

    A process left without rows in a batch still runs the step (the others wait
    for its gradients) on a padding row. Its gradients are zeroed before they are
    averaged (``_compat.gradient_share``: numpy batches carry no sample weights the
    user did not give, so the row itself is not weighted 0), and Keras's
    ``metrics`` would count it: their state is saved before such a step and put
    back after. Steps ``first`` and later of each epoch are padding.

    >>> cb = UndoPaddingMetrics(first=4, run=FitRun(None, None, checkpoints=False))
    """

    def __init__(self, first: int, run: FitRun) -> None:
        super().__init__()
        self.first = first
        self.run = run
        self._saved: list[Any] | None = None

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        if self.run.batch >= self.first:
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


class AverageStepOutputs(DetCallback):
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


class AggregateMetrics(DetCallback):
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
