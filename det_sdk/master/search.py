"""The searcher's side of the master: the trials an experiment starts with, and the
operations (lengths to train to) each trial gets, decided as it reports.

The pure rules live in ``det_sdk.master.searchers``; this module applies them to the
store. Every decision is recorded before it is answered, so a repeated report (a
retry, or a master restarted in between) gets the first answer again.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

from det_sdk.config import AdaptiveASHASearcher, ExperimentConfig, Length
from det_sdk.master.errors import InvalidRequest, NotFound
from det_sdk.master.rows import TrialRow
from det_sdk.master.searchers import brackets, initial_trials, promotes, rung_lengths
from det_sdk.master.store import Store

__all__ = ["Search", "planned_trials"]


def planned_trials(config: ExperimentConfig, seed: int) -> list[dict[str, Any]]:
    """Every trial the search will run, with its hparams, seed, bracket and first length.

    Created with the experiment, in one transaction: the search survives a master
    restart without creating any trial twice.

    >>> cfg = ExperimentConfig.model_validate({"hyperparameters": {"lr": 0.1}})
    >>> planned_trials(cfg, seed=3)
    [{'hparams': {'lr': 0.1}, 'seed': 3, 'bracket': 0, 'target': None}]
    """
    try:
        trial_hparams = initial_trials(config, seed)
    except ValueError as err:
        raise InvalidRequest(f"invalid experiment config: {err}") from None
    return [
        {"hparams": hp, "seed": (seed + i) % 2**31, "bracket": b,
         "target": next(iter(rung_lengths(config, b)), None)}
        for i, (hp, b) in enumerate(zip(trial_hparams, brackets(config, len(trial_hparams))))
    ]


def _target(t: TrialRow, max_length: Length) -> int:
    """The length a trial trains to now: its rung (ASHA), else the searcher's max_length."""
    return t["target"] if t["target"] is not None else max_length.value


class Search:
    """Searcher operations of the trials of a store."""

    def __init__(self, store: Store, lock: threading.RLock,
                 config_of: Callable[[int], ExperimentConfig]) -> None:
        self.store = store
        self.lock = lock
        self.config_of = config_of

    def _trial(self, trial_id: int) -> TrialRow:
        t = self.store.trial(trial_id)
        if t is None:
            raise NotFound(f"no trial {trial_id}")
        return t

    def _max_length(self, trial_id: int) -> Length | None:
        cfg = self.config_of(trial_id)
        return cfg.searcher.max_length if cfg.searcher else None

    def operation(self, trial_id: int, t: TrialRow | None = None) -> dict[str, Any] | None:
        """What the trial trains to now: ``{unit, length, completed}``; None: its own choice."""
        t = t or self._trial(trial_id)
        length = self._max_length(trial_id)
        if length is None:
            return None
        return {"unit": length.unit, "length": _target(t, length),
                "completed": bool(t["searcher_done"])}

    def finished(self, t: TrialRow) -> bool:
        """Whether a trial had done all its training: its searcher said "completed" (or
        stopped it: time_metric), or (a trial that picks its own length) it reported
        progress 1.0."""
        if t["searcher_done"]:
            return True
        return self._max_length(t["id"]) is None and t["progress"] >= 1.0

    def wants_stop(self, trial_id: int, t: TrialRow) -> bool:
        """Whether the searcher has stopped a trial that never asks it for operations
        (Determined 0.38's ``time_metric`` ASHA): its preemption poll answers yes."""
        searcher = self.config_of(trial_id).searcher
        return bool(t["searcher_done"]) and isinstance(searcher, AdaptiveASHASearcher) \
            and searcher.time_metric is not None

    def report_time(self, trial_id: int, steps: int, epoch: int,
                    metrics: dict[str, Any]) -> bool:
        """A validation report of a trial under Determined 0.38's ``time_metric`` ASHA.

        The reported value of ``time_metric`` (a metric the script reports; ``batches``
        and ``epochs`` fall back to the report's steps_completed and epoch) places the
        trial on the rungs, each reached rung is decided with the report's searcher
        metric as :meth:`complete` decides, and a trial that is not promoted, or that
        reached ``max_time``, is done: its preemption poll says stop (the script exits,
        and the trial is COMPLETED). Returns whether the trial was just stopped.
        Idempotent like :meth:`complete`: a repeated report finds its rungs decided.
        """
        cfg = self.config_of(trial_id)
        searcher = cfg.searcher
        if not isinstance(searcher, AdaptiveASHASearcher) or searcher.time_metric is None:
            return False
        now = metrics.get(searcher.time_metric)
        if now is None:
            now = {"batches": steps, "epochs": epoch}.get(searcher.time_metric)
        metric = metrics.get(searcher.metric)
        if not isinstance(now, int | float) or not isinstance(metric, int | float) \
                or math.isnan(now):
            return False  # not a report the searcher can place: training goes on
        metric = float(metric)
        with self.lock:
            t = self._trial(trial_id)
            if t["searcher_done"]:
                return False
            ladder = rung_lengths(cfg, t["bracket"])
            target = t["target"] if t["target"] is not None else ladder[0]
            while now >= target:
                if target == ladder[-1]:  # reached max_time: done
                    self.store.update_trial(trial_id, searcher_done=1)
                    return True
                rung = ladder.index(target)
                if math.isnan(metric):  # ranks last (SQLite would keep NaN as NULL)
                    metric = math.inf if searcher.smaller_is_better else -math.inf
                if self.store.rung_result(trial_id, rung) is None:
                    results = [(r["trial_id"], r["metric"]) for r in
                               self.store.rung_results(t["experiment_id"], t["bracket"], rung)]
                    results.append((trial_id, metric))
                    go_on = promotes(results, trial_id, searcher.divisor,
                                     searcher.smaller_is_better)
                    self.store.record_rung(trial_id, rung, metric, go_on, ladder[rung + 1])
                t = self._trial(trial_id)
                if t["searcher_done"]:
                    return True
                # promoted: record_rung set the next rung's length
                target = t["target"] if t["target"] is not None else ladder[rung + 1]
        return False

    def complete(self, trial_id: int, unit: str, length: int,
                 metric: float) -> dict[str, Any] | None:
        """The trial trained to ``length`` and validated: decide, and answer its next operation.

        Idempotent: a report repeated after a retry gets the decision made the first time.
        """
        cfg = self.config_of(trial_id)
        max_length = self._max_length(trial_id)
        if max_length is None:
            return None
        if unit != max_length.unit:
            raise InvalidRequest(
                f"unit: the searcher counts in {max_length.unit}, not {unit}")
        with self.lock:
            t = self._trial(trial_id)
            ladder = rung_lengths(cfg, t["bracket"])
            target = _target(t, max_length)
            if t["searcher_done"] or length < target:
                return self.operation(trial_id, t)  # a repeat, or not there yet
            if target not in ladder[:-1]:  # the last rung (or the only length): done
                self.store.update_trial(trial_id, searcher_done=1)
                return self.operation(trial_id)
            rung = ladder.index(target)
            # cfg.searcher is set (max_length is its) and, with rungs, ASHA's (divisor)
            searcher = cfg.searcher
            assert isinstance(searcher, AdaptiveASHASearcher)  # rungs are ASHA's
            if math.isnan(metric):  # ranks last (SQLite would keep NaN as NULL)
                metric = math.inf if searcher.smaller_is_better else -math.inf
            if self.store.rung_result(trial_id, rung) is None:
                results = [(r["trial_id"], r["metric"]) for r in
                           self.store.rung_results(t["experiment_id"], t["bracket"], rung)]
                results.append((trial_id, metric))
                go_on = promotes(results, trial_id, searcher.divisor,
                                 searcher.smaller_is_better)
                self.store.record_rung(trial_id, rung, metric, go_on, ladder[rung + 1])
        return self.operation(trial_id)
