"""The master's checkpoint records and their page."""

from __future__ import annotations

import time
from typing import Any, cast

from det_sdk.master.rows import CheckpointListRow, CheckpointRow
from det_sdk.master.store.database import Database, before, metrics_json, row

__all__ = ["CheckpointTables"]


class CheckpointTables(Database):
    """The ``checkpoints`` table."""

    def put_checkpoint(self, c: dict[str, Any]) -> int:
        """Record a checkpoint unless its uuid is known; returns the trial that owns the uuid.

        A uuid belongs to the trial that first registered it: a second registration
        (a retried report, or another trial's attempt) changes nothing, and the caller
        compares the owner with the reporting trial.
        """
        with self.tx() as db:
            db.execute(
                "INSERT INTO checkpoints (uuid, trial_id, steps, epoch, batch, size, metrics,"
                " created, stage, searched, keras_backend)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(uuid) DO NOTHING",
                (c["uuid"], c["trial_id"], c["steps_completed"], c["epoch"], c.get("batch", 0),
                 c.get("size", 0), metrics_json(c.get("metrics", {})), time.time(),
                 c.get("stage"), None if c.get("searched", True) else 0,
                 c.get("keras_backend")),
            )
            (owner,) = db.execute("SELECT trial_id FROM checkpoints WHERE uuid = ?",
                                  (c["uuid"],)).fetchone()
        return int(owner)

    def checkpoint(self, uuid: str) -> CheckpointRow | None:
        return self._one("SELECT * FROM checkpoints WHERE uuid = ?", uuid)

    def checkpoints(self, trial_id: int | None = None) -> list[CheckpointRow]:
        if trial_id is None:
            return self._all("SELECT * FROM checkpoints ORDER BY trial_id, steps")
        return self._all("SELECT * FROM checkpoints WHERE trial_id = ? ORDER BY steps, created",
                         trial_id)

    def mark_checkpoint_damaged(self, uuid: str, reason: str) -> None:
        self._exec("UPDATE checkpoints SET damaged = ? WHERE uuid = ?", reason, uuid)

    def delete_checkpoint(self, uuid: str) -> None:
        self._exec("DELETE FROM checkpoints WHERE uuid = ?", uuid)

    def checkpoint_page(self, trial_id: int | None, before_seq: int | None, limit: int
                        ) -> tuple[list[CheckpointListRow], int]:
        """Up to ``limit`` checkpoints (of one trial) recorded before ``before_seq``, newest
        first, with each one's experiment and its ``checkpoint_storage`` (JSON text); and
        how many there are."""
        where, args = "c.rowid < ?", [before(before_seq)]
        if trial_id is not None:
            where, args = f"c.trial_id = ? AND {where}", [trial_id, *args]
        with self._lock:
            rows = [row(r) for r in self._db.execute(
                "SELECT c.rowid AS seq, c.*, t.experiment_id, e.owner_id,"
                " json_extract(e.config, '$.checkpoint_storage') AS storage"
                " FROM checkpoints c LEFT JOIN trials t ON t.id = c.trial_id"
                f" LEFT JOIN experiments e ON e.id = t.experiment_id WHERE {where}"
                " ORDER BY c.rowid DESC LIMIT ?", (*args, limit))]
            (total,) = self._db.execute(
                "SELECT COUNT(*) FROM checkpoints" if trial_id is None else
                "SELECT COUNT(*) FROM checkpoints WHERE trial_id = ?",
                () if trial_id is None else (trial_id,)).fetchone()
        # SQLite's rows are plain dicts of exactly the row type's columns
        return cast("list[CheckpointListRow]", rows), int(total)
