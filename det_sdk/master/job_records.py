"""What a job's chief reports beyond its latest progress (issue 40): a bounded history of
its progress reports (the job page's throughput chart) and its metrics (``report_metrics``
in a job: det.keras's fit, det.core's ``train.report_training_metrics``, the
``torch_batch_process`` context's), kept per job as a trial's are per trial.

Its own tables in the master's database, created on first use, like the model registry
(``det_sdk.master.models``): the rest of the store knows nothing of them.

The history is bounded: past :data:`MAX_PROGRESS_POINTS` points a job's history is
thinned, every other point of it dropped but its first and last, so a job reporting for
weeks (or a hostile one reporting in a loop) holds at most that many rows, each later
point standing for a longer stretch. A rate between two kept points is still the true
mean rate over that stretch: rows done only grow within one process.

>>> from det_sdk.master.store import Store
>>> s = Store(":memory:")
>>> job = s.create_job({"name": "j"}, "a.tgz")
>>> s.update_job(job, state="RUNNING")
>>> r = JobRecords(s, max_points=4)
>>> for i in range(10):
...     _ = r.record_progress(job, "a1", i * 10, 100, None, ("RUNNING",), now=float(i))
>>> [p["rows_done"] for p in r.progress_points(job)]
[0, 60, 80, 90]
>>> throughput(r.progress_points(job))["rows_per_second"]
[10.0, 10.0, 10.0]
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from det_sdk.api import decode_metric, encode_metric

__all__ = ["MAX_PROGRESS_POINTS", "JobRecords", "throughput"]

#: the most progress points kept per job (then thinned to about half)
MAX_PROGRESS_POINTS = 1000

_TABLES = (
    """CREATE TABLE IF NOT EXISTS job_progress_points (
        job_id INTEGER NOT NULL, time REAL NOT NULL, rows_done INTEGER NOT NULL,
        alloc TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS job_progress_by_job ON job_progress_points(job_id, time)",
    """CREATE TABLE IF NOT EXISTS job_metrics (
        job_id INTEGER NOT NULL, grp TEXT NOT NULL, steps INTEGER NOT NULL,
        epoch INTEGER NOT NULL, metrics TEXT NOT NULL, time REAL NOT NULL,
        PRIMARY KEY (job_id, grp, steps))""",
)


def _metrics_json(metrics: Mapping[str, float]) -> str:
    """Standard JSON, non-finite values as the wire's strings (as the trials' table)."""
    return json.dumps({k: encode_metric(float(v)) for k, v in metrics.items()})


class JobRecords:
    """The jobs' progress history and metrics in ``store``'s database (a
    ``det_sdk.master.store.Store``)."""

    def __init__(self, store: Any, max_points: int = MAX_PROGRESS_POINTS) -> None:
        self.store = store
        self.max_points = max(4, max_points)
        with store.tx() as db:
            for sql in _TABLES:
                db.execute(sql)

    # --- progress ----------------------------------------------------------------------

    def record_progress(self, job_id: int, alloc_id: str, rows_done: int,
                        rows_total: int | None, output: str | None, states: Collection[str],
                        now: float | None = None) -> bool:
        """Keep a job's latest progress report on its row (the rate's window starts with
        an allocation's first report) and add it to the history, in one transaction,
        only while the job is in one of ``states``. False: no such job in those states."""
        now = time.time() if now is None else now
        marks = ",".join("?" * len(states))
        with self.store.tx() as db:
            cur = db.execute(
                "UPDATE jobs SET rows_done = ?, rows_total = ?, output = COALESCE(?, output),"
                " progress_at = ?,"
                " rate_rows = CASE WHEN rate_alloc IS ? THEN rate_rows ELSE ? END,"
                " rate_at = CASE WHEN rate_alloc IS ? THEN rate_at ELSE ? END,"
                " rate_alloc = ?"
                f" WHERE id = ? AND state IN ({marks})",
                (rows_done, rows_total, output, now, alloc_id, rows_done, alloc_id, now,
                 alloc_id, job_id, *states))
            if cur.rowcount == 0:
                return False
            db.execute("INSERT INTO job_progress_points VALUES (?, ?, ?, ?)",
                       (job_id, now, rows_done, alloc_id))
            (n,) = db.execute("SELECT COUNT(*) FROM job_progress_points WHERE job_id = ?",
                              (job_id,)).fetchone()
            if n > self.max_points:
                # every other point goes but the first and the last: half as many, the
                # same span; runs once per max_points / 2 reports
                rowids = [r[0] for r in db.execute(
                    "SELECT rowid FROM job_progress_points WHERE job_id = ?"
                    " ORDER BY time, rowid", (job_id,))]
                drop = rowids[1:-1:2]
                db.executemany("DELETE FROM job_progress_points WHERE rowid = ?",
                               [(r,) for r in drop])
        return True

    def progress_points(self, job_id: int) -> list[dict[str, Any]]:
        """The job's kept progress reports, oldest first: ``time``, ``rows_done``,
        ``alloc``."""
        with self.store.tx() as db:
            return [{"time": t, "rows_done": r, "alloc": a} for t, r, a in db.execute(
                "SELECT time, rows_done, alloc FROM job_progress_points WHERE job_id = ?"
                " ORDER BY time, rowid", (job_id,))]

    # --- metrics -----------------------------------------------------------------------

    def record_metrics(self, job_id: int, group: str, steps: int, epoch: int,
                       metrics: Mapping[str, float], states: Collection[str]) -> bool:
        """Keep one report (one per job, group and step: a repeat replaces), only while
        the job is in one of ``states``. False: no such job in those states."""
        marks = ",".join("?" * len(states))
        with self.store.tx() as db:
            if db.execute(f"SELECT 1 FROM jobs WHERE id = ? AND state IN ({marks})",
                          (job_id, *states)).fetchone() is None:
                return False
            db.execute("INSERT OR REPLACE INTO job_metrics VALUES (?, ?, ?, ?, ?, ?)",
                       (job_id, group, steps, epoch, _metrics_json(metrics), time.time()))
        return True

    def metric_columns(self, job_id: int, group: str, after_steps: int | None = None
                       ) -> tuple[str, str, str, str] | None:
        """A job group's reports past ``after_steps`` (all if None) in steps order as
        columns, the form ``det_sdk.master.ui.series.Series.extend`` reads (as
        ``Store.metric_columns``); None if there are none."""
        with self.store.tx() as db:
            row = db.execute(
                "SELECT group_concat(steps), group_concat(epoch), group_concat(time),"
                " '[' || group_concat(metrics) || ']' FROM (SELECT steps, epoch, time, metrics"
                " FROM job_metrics WHERE job_id = ? AND grp = ? AND steps > ? ORDER BY steps)",
                (job_id, group, -1 if after_steps is None else after_steps)).fetchone()
        return None if row[0] is None else tuple(row)

    def processes(self, job_id: int) -> int:
        """How many processes (allocations) the job has had: a new one may report steps
        again (a resume), so a cached series is read again whole when this changes."""
        with self.store.tx() as db:
            (n,) = db.execute("SELECT COUNT(*) FROM allocations WHERE job_id = ?",
                              (job_id,)).fetchone()
        return int(n)

    def latest_metrics(self, job_id: int) -> dict[str, dict[str, Any]]:
        """Each group's report of the highest step: ``{group: {steps_completed, epoch,
        metrics}}`` (non-finite values as floats)."""
        with self.store.tx() as db:
            rows = db.execute(
                "SELECT grp, steps, epoch, metrics FROM job_metrics m WHERE job_id = ? AND"
                " steps = (SELECT MAX(steps) FROM job_metrics WHERE job_id = m.job_id"
                " AND grp = m.grp) ORDER BY grp", (job_id,)).fetchall()
        return {g: {"steps_completed": s, "epoch": e,
                    "metrics": {k: decode_metric(v) for k, v in json.loads(m).items()}}
                for g, s, e, m in rows}

    def metric_group_ends(self, job_id: int) -> dict[str, int]:
        """The last step of each group the job reported (the page reloads on a change)."""
        with self.store.tx() as db:
            return dict(db.execute("SELECT grp, MAX(steps) FROM job_metrics WHERE job_id = ?"
                                   " GROUP BY grp", (job_id,)).fetchall())


def throughput(points: Sequence[Mapping[str, Any]]) -> dict[str, list[float]]:
    """Rows per second between consecutive progress points of one process, at the later
    point's time (seconds since the first point): ``{"time": [...], "rows_per_second":
    [...]}``. Nothing between two processes (the pause between them is no rate), nor
    between points at the same time.

    >>> throughput([{"time": 10.0, "rows_done": 0, "alloc": "a"},
    ...             {"time": 12.0, "rows_done": 50, "alloc": "a"},
    ...             {"time": 20.0, "rows_done": 50, "alloc": "b"},
    ...             {"time": 21.0, "rows_done": 80, "alloc": "b"}])
    {'time': [2.0, 11.0], 'rows_per_second': [25.0, 30.0]}
    """
    times: list[float] = []
    rates: list[float] = []
    t0 = points[0]["time"] if points else 0.0
    for a, b in itertools.pairwise(points):
        dt = b["time"] - a["time"]
        if a["alloc"] != b["alloc"] or dt <= 0:
            continue
        times.append(round(b["time"] - t0, 3))
        rates.append(max(0.0, (b["rows_done"] - a["rows_done"]) / dt))
    return {"time": times, "rows_per_second": rates}
