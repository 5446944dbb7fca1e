"""A job's progress as people read it: fraction done, rows per second, time left.

The chief of a batch job reports ``rows_done`` and ``rows_total`` (None: the input's
length is unknown) at its progress checkpoints; the master keeps the latest report and
the first one of the current process (its allocation). The rate is measured over the
current process only: rows a resumed job had done before it started again are not
counted as if they had taken no time.

>>> view = job_progress("RUNNING", rows_done=600, rows_total=1000, first_rows=200,
...                     first_at=10.0, last_at=20.0)
>>> view["progress"], view["rows_per_second"], view["eta_seconds"]
(0.6, 40.0, 10.0)
>>> job_progress("RUNNING", 600, None, 200, 10.0, 20.0)["progress"] is None
True
"""

from __future__ import annotations

from typing import Any

__all__ = ["job_progress"]

_RUNNING = ("RUNNING", "STOPPING_PAUSED", "STOPPING_CANCELED")


def job_progress(state: str, rows_done: int | None, rows_total: int | None,
                 first_rows: int | None, first_at: float | None,
                 last_at: float | None) -> dict[str, Any]:
    """``progress`` (in [0, 1]; None while the total is unknown, 1.0 once COMPLETED),
    ``rows_per_second`` (None until two reports of one process are apart in time) and
    ``eta_seconds`` (None unless running with a known total and a measured rate)."""
    progress: float | None = None
    if state == "COMPLETED":
        progress = 1.0
    elif rows_done is not None and rows_total is not None:
        progress = min(1.0, rows_done / rows_total) if rows_total > 0 else 1.0
    rate: float | None = None
    if (rows_done is not None and first_rows is not None and first_at is not None
            and last_at is not None and last_at > first_at):
        rate = max(0.0, (rows_done - first_rows) / (last_at - first_at))
    eta: float | None = None
    if state in _RUNNING and rate and rows_total is not None and rows_done is not None:
        eta = max(0, rows_total - rows_done) / rate
    return {"progress": progress, "rows_done": rows_done, "rows_total": rows_total,
            "rows_per_second": rate, "eta_seconds": eta}
