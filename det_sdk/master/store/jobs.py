"""The master's generic jobs (batch inference) and their page."""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any, cast

from det_sdk.master.rows import JobRow, JobSummaryRow
from det_sdk.master.store.database import Database, before, config_json, inserted

__all__ = ["JobTables"]


class JobTables(Database):
    """The ``jobs`` table."""

    def jobs_in_states(self, states: Collection[str]) -> list[JobRow]:
        marks = ", ".join("?" for _ in states)
        return self._all(f"SELECT * FROM jobs WHERE state IN ({marks}) ORDER BY id",
                         *[str(getattr(s, "value", s)) for s in states])

    # --- jobs ---------------------------------------------------------------------------

    def create_job(self, config: dict[str, Any], archive: str,
                   owner_id: int | None = None) -> int:
        with self.tx() as db:
            cur = db.execute(
                "INSERT INTO jobs (name, config, state, archive, created, owner_id)"
                " VALUES (?, ?, 'QUEUED', ?, ?, ?)",
                (config.get("name"), config_json(config), archive, time.time(), owner_id),
            )
            return inserted(cur)

    def job(self, job_id: int) -> JobRow | None:
        return self._one("SELECT * FROM jobs WHERE id = ?", job_id)

    def jobs(self) -> list[JobRow]:
        return self._all("SELECT * FROM jobs ORDER BY id")

    def update_job(self, job_id: int, **fields: Any) -> None:
        if fields.get("state") in ("COMPLETED", "CANCELED", "ERROR"):
            fields.setdefault("ended", time.time())
        cols = ", ".join(f"{k} = ?" for k in fields)
        self._exec(f"UPDATE jobs SET {cols} WHERE id = ?", *fields.values(), job_id)

    def job_page(self, before_id: int | None, limit: int) -> tuple[list[JobSummaryRow], int]:
        """Up to ``limit`` jobs with ids below ``before_id``, newest first, and how many
        jobs there are."""
        with self._lock:
            jobs = [dict(r) for r in self._db.execute(
                "SELECT id, name, state, exit_code, created, ended,"
                " json_extract(config, '$.entrypoint_script') AS entrypoint,"
                " json_extract(config, '$.resources.slots') AS slots,"
                " rows_done, rows_total, owner_id AS user_id"
                " FROM jobs WHERE id < ? ORDER BY id DESC LIMIT ?",
                (before(before_id), limit))]
            (total,) = self._db.execute("SELECT COUNT(*) FROM jobs").fetchone()
        # SQLite's rows are plain dicts of exactly the row type's columns
        return cast("list[JobSummaryRow]", jobs), int(total)
