"""The master's metric reports: what a trial reports, and the reads of the web UI and the pages."""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Sequence
from typing import Any

from det_sdk.master.rows import MetricsRow
from det_sdk.master.store.database import Database, metrics_json
from det_sdk.wire import is_rankable

__all__ = ["MetricTables"]


class MetricTables(Database):
    """The ``metrics`` table."""

    def record_metrics(self, trial_id: int, group: str, steps: int, epoch: int,
                       metrics: dict[str, float], searcher_value: float | None,
                       smaller_is_better: bool, states: Collection[str] | None = None,
                       advance: bool = True) -> bool:
        """Store a report and advance the trial's progress and best metric, atomically.

        One value per (trial, group, steps). Returns False if there is no such trial, or
        (with ``states``) it is in none of them: the check and the write are one statement.
        A non-finite searcher value (NaN, +/-Infinity) never becomes the best: it is the
        worst value in both directions (:func:`det_sdk.wire.metric_rank`), and a trial
        without a finite one has ``best_metric`` NULL, which ranks last.
        ``advance=False`` (a stage the searcher does not measure, det_sdk.stages): the
        report is stored, the trial's progress and best metric stay.
        """
        better = "<" if smaller_is_better else ">"
        if searcher_value is not None and not is_rankable(searcher_value):
            searcher_value = None
        where = "id = ?"
        args: list[Any] = [steps, epoch, steps, searcher_value, searcher_value, searcher_value,
                           trial_id]
        if states is not None:
            where += f" AND state IN ({', '.join('?' for _ in states)})"
            args += [str(getattr(s, "value", s)) for s in states]
        with self.tx() as db:
            if advance:
                cur = db.execute(
                    "UPDATE trials SET"
                    " epoch = CASE WHEN ? >= steps_completed THEN ? ELSE epoch END,"
                    " steps_completed = MAX(steps_completed, ?),"
                    f" best_metric = CASE WHEN ? IS NOT NULL AND (best_metric IS NULL"
                    f" OR ? {better} best_metric) THEN ? ELSE best_metric END"
                    f" WHERE {where}", args,
                )
            else:  # the state check alone, in the same statement form
                cur = db.execute(f"UPDATE trials SET state = state WHERE {where}", args[6:])
            if cur.rowcount == 0:
                return False
            db.execute("INSERT OR REPLACE INTO metrics VALUES (?, ?, ?, ?, ?, ?)",
                       (trial_id, group, steps, epoch, metrics_json(metrics), time.time()))
        return True

    def metrics(self, trial_id: int, group: str | None = None) -> list[MetricsRow]:
        if group is None:
            return self._all("SELECT * FROM metrics WHERE trial_id = ? ORDER BY steps, grp",
                             trial_id)
        return self._all("SELECT * FROM metrics WHERE trial_id = ? AND grp = ? ORDER BY steps",
                         trial_id, group)

    def metric_stages(self, trial_id: int, metric: str) -> list[dict[str, Any]]:
        """Per stored group of the trial (det_sdk.stages.stored_group): its last step and
        epoch and, for validation groups, the least and greatest finite ``metric``."""
        with self._lock:
            return [dict(r) for r in self._db.execute(
                "SELECT grp, MAX(steps) AS steps, MAX(epoch) AS epoch, MIN(time) AS first,"
                " MIN(CASE WHEN typeof(json_extract(metrics, '$.' || ?)) IN ('real', 'integer')"
                " THEN json_extract(metrics, '$.' || ?) END) AS least,"
                " MAX(CASE WHEN typeof(json_extract(metrics, '$.' || ?)) IN ('real', 'integer')"
                " THEN json_extract(metrics, '$.' || ?) END) AS greatest"
                " FROM metrics WHERE trial_id = ? GROUP BY grp",
                (*(json.dumps(metric),) * 4, trial_id))]

    # --- read-only queries for the web UI (det_sdk.master.ui) ------------------------------
    # (its lists read the pages below: experiment_page, job_page)

    def metric_columns(self, trial_id: int, group: str, after_steps: int | None = None
                       ) -> tuple[str, str, str, str] | None:
        """A trial group's reports past ``after_steps`` (all if None) in steps order, as
        columns: steps, epochs and times comma-separated, and the metrics as one JSON
        array; None if there are none. Only a primary-key range is read.

        Columns, because one ``json.loads`` of a 5 MB array and three ``split``s cost a
        third of 100,000 row tuples and 100,000 ``json.loads`` (the first view of a long
        trial). SQLite concatenates in the subquery's order in practice; the caller
        checks the steps are sorted rather than rely on it.
        """
        with self._lock:
            row = self._db.execute(
                "SELECT group_concat(steps), group_concat(epoch), group_concat(time),"
                " '[' || group_concat(metrics) || ']' FROM (SELECT steps, epoch, time, metrics"
                " FROM metrics WHERE trial_id = ? AND grp = ? AND steps > ? ORDER BY steps)",
                (trial_id, group, -1 if after_steps is None else after_steps)).fetchone()
        return None if row[0] is None else tuple(row)

    def metric_group_ends(self, trial_id: int) -> dict[str, int]:
        """The last step of each metric group the trial has reported (one index probe
        each, where a COUNT would read every row): pages poll this to see new metrics."""
        out = {}
        with self._lock:
            for grp in ("training", "validation", "evaluation"):
                (last,) = self._db.execute(
                    "SELECT MAX(steps) FROM metrics WHERE trial_id = ? AND grp = ?",
                    (trial_id, grp)).fetchone()
                if last is not None:
                    out[grp] = last
        return out

    def validation_metric(self, trial_ids: Sequence[int], metric: str
                          ) -> list[tuple[int, int, int, Any]]:
        """One validation metric of these trials: ``(trial_id, steps, epoch, value)`` rows
        in trial and steps order (the experiment page's learning curves). The value is
        None where a report lacks the metric, ``"NaN"``/``"Infinity"`` where it was not
        finite (``det_sdk.api.encode_metric``). A primary-key range per trial.

        >>> from det_sdk.master.store import Store
        >>> s = Store(":memory:")
        >>> exp = s.create_experiment_with_trials({}, "a", [
        ...     {"hparams": {}, "seed": 0, "bracket": 0, "target": None}])
        >>> _ = s.record_metrics(1, "validation", 10, 1, {"val_loss": 0.5}, 0.5, True)
        >>> _ = s.record_metrics(1, "validation", 20, 2, {"acc": 0.9}, None, True)
        >>> s.validation_metric([1], "val_loss")
        [(1, 10, 1, 0.5), (1, 20, 2, None)]
        """
        if not trial_ids:
            return []
        with self._lock:
            return [tuple(r) for r in self._db.execute(
                "SELECT trial_id, steps, epoch, json_extract(metrics, '$.' || ?) FROM metrics"
                f" WHERE trial_id IN ({', '.join('?' for _ in trial_ids)})"
                " AND grp = 'validation' ORDER BY trial_id, steps",
                (json.dumps(metric), *trial_ids))]

    def latest_metrics(self, exp_id: int, group: str) -> dict[int, dict[str, Any]]:
        """Each trial's latest metrics of ``group`` in the experiment, by trial id."""
        rows = self._all(
            "SELECT m.trial_id, m.metrics FROM metrics m JOIN trials t ON t.id = m.trial_id"
            " WHERE t.experiment_id = ? AND m.grp = ? AND m.steps = (SELECT MAX(steps)"
            " FROM metrics WHERE trial_id = m.trial_id AND grp = m.grp)", exp_id, group)
        return {r["trial_id"]: r["metrics"] for r in rows}

    def metrics_after(self, trial_id: int, group: str, after_steps: int | None,
                      limit: int) -> list[MetricsRow]:
        """A trial group's first ``limit`` reports past ``after_steps``, in steps order (a
        primary-key range)."""
        return self._all(
            "SELECT * FROM metrics WHERE trial_id = ? AND grp = ? AND steps > ?"
            " ORDER BY steps LIMIT ?", trial_id, group,
            -1 if after_steps is None else after_steps, limit)
