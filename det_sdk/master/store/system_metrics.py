"""The profiler's system metrics (det_sdk.profiler): the ``system_metrics`` table.

A table of their own, not the ``metrics`` table with groups of their own: ``metrics``
keeps one report per (trial, group, step) and feeds the searcher, the best metric and
the pages' learning curves, while the profiler's records are keyed by time (several a
step, or none: a script that reports no steps), nested per host and GPU, and many. Here
they cannot replace a training report nor slow the reads of one; a trial keeps at most
:data:`MAX_ROWS_PER_TRIAL` of them (the rest are refused and counted by the route).

>>> from det_sdk.master.store import Store
>>> s = Store(":memory:")
>>> s.record_system_metrics(1, [{"group": "cpu", "time": 1.0, "steps_completed": None,
...                              "metrics": {"h": {"cpu_util_simple": 5.0}}}])
1
>>> [(r["group"], r["metrics"]) for r in s.system_metrics(1, "cpu")]
[('cpu', {'h': {'cpu_util_simple': 5.0}})]
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from det_sdk.master.store.database import Database

__all__ = ["MAX_ROWS_PER_TRIAL", "SystemMetricTables"]

#: system metric records one trial keeps: at the default rate (5 groups a minute) about
#: 2 weeks of training, at ``profiling.enabled``'s (every 10 s) 2 days
MAX_ROWS_PER_TRIAL = 100_000


class SystemMetricTables(Database):
    """The ``system_metrics`` table."""

    def record_system_metrics(self, trial_id: int, records: Sequence[dict[str, Any]]) -> int:
        """Store ``records`` (``group``, ``time``, ``steps_completed``, ``metrics``) of a
        trial; how many were stored (those past the trial's limit are not)."""
        with self.tx() as db:
            (have,) = db.execute("SELECT COUNT(*) FROM system_metrics WHERE trial_id = ?",
                                 (trial_id,)).fetchone()
            room = max(MAX_ROWS_PER_TRIAL - int(have), 0)
            db.executemany(
                "INSERT INTO system_metrics (trial_id, grp, time, steps, data)"
                " VALUES (?, ?, ?, ?, ?)",
                [(trial_id, r["group"], float(r["time"]), r.get("steps_completed"),
                  json.dumps(r["metrics"], allow_nan=False)) for r in records[:room]])
        return min(len(records), room)

    def system_metrics(self, trial_id: int, group: str | None = None, after_id: int = 0,
                       limit: int = 1000) -> list[dict[str, Any]]:
        """A trial's records of ``group`` (all groups if None) past ``after_id``, oldest
        first, ``limit`` at most: ``id``, ``group``, ``time``, ``steps_completed``,
        ``metrics``."""
        where = "trial_id = ? AND id > ?"
        args: list[Any] = [trial_id, after_id]
        if group is not None:
            where += " AND grp = ?"
            args.append(group)
        with self._lock:
            rows = self._db.execute(
                f"SELECT id, grp, time, steps, data FROM system_metrics WHERE {where}"
                " ORDER BY id LIMIT ?", (*args, limit)).fetchall()
        return [{"id": r[0], "group": r[1], "time": r[2], "steps_completed": r[3],
                 "metrics": json.loads(r[4])} for r in rows]

    def latest_system_metrics(self, trial_ids: Sequence[int], group: str
                              ) -> dict[int, dict[str, Any]]:
        """Each trial's newest record of ``group`` (the cluster view: GPUs in use now)."""
        out: dict[int, dict[str, Any]] = {}
        with self._lock:
            for tid in trial_ids:
                r = self._db.execute(
                    "SELECT time, data FROM system_metrics WHERE trial_id = ? AND grp = ?"
                    " ORDER BY id DESC LIMIT 1", (tid, group)).fetchone()
                if r is not None:
                    out[tid] = {"time": r[0], "metrics": json.loads(r[1])}
        return out
