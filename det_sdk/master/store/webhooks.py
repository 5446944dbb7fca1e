"""The master's webhooks, their triggers and the outcome of each delivery (SQLite).

Kept beside :class:`det_sdk.master.store.Store` on its connection (its ``tx()``), not
mixed into it: the tables are created when :class:`WebhookTables` is built. A webhook's
signing key is kept in clear (the master signs with it); the database file is the
master's alone (0600 in a 0700 directory), as its tokens' hashes are.

>>> from det_sdk.master.store import Store
>>> hooks = WebhookTables(Store(":memory:"))
>>> wid = hooks.create_webhook("ops", "http://127.0.0.1:9/", "DEFAULT", "WORKSPACE", "k",
...                            [("CUSTOM", {})])
>>> hooks.webhook(wid)["triggers"][0]["trigger_type"]
'CUSTOM'
>>> "signing_key" in hooks.webhooks()[0]
False
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

from det_sdk.master.store.database import Database

__all__ = ["DELIVERY_STATES", "KEPT_DELIVERIES", "WebhookTables"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS webhooks (
    id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL UNIQUE, url TEXT NOT NULL,
    webhook_type TEXT NOT NULL, mode TEXT NOT NULL, signing_key TEXT NOT NULL,
    created REAL NOT NULL, workspace_id INTEGER
);
CREATE TABLE IF NOT EXISTS webhook_triggers (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    webhook_id INTEGER NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
    trigger_type TEXT NOT NULL, condition TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS webhook_deliveries (
    id INTEGER PRIMARY KEY AUTOINCREMENT, webhook_id INTEGER NOT NULL,
    event_id TEXT NOT NULL, event_type TEXT NOT NULL, experiment_id INTEGER,
    state TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, status_code INTEGER,
    error TEXT, created REAL NOT NULL, finished REAL
);
CREATE TABLE IF NOT EXISTS webhook_pending (
    delivery_id INTEGER PRIMARY KEY, body BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS webhook_triggers_by_webhook ON webhook_triggers(webhook_id);
CREATE INDEX IF NOT EXISTS webhook_deliveries_by_webhook ON webhook_deliveries(webhook_id);
"""

#: A delivery is QUEUED, SENDING (an attempt under way or a retry waiting), then
#: DELIVERED or FAILED. While unfinished its body is kept in ``webhook_pending`` (at
#: most the deliverer's queue capacity of them), so that a restarted master resumes it.
DELIVERY_STATES = ("QUEUED", "SENDING", "DELIVERED", "FAILED")
#: The newest deliveries kept (older outcomes are forgotten as new ones are recorded).
KEPT_DELIVERIES = 10_000
_PUBLIC = "id, name, url, webhook_type, mode, created, workspace_id"


class WebhookTables:
    """The ``webhooks``, ``webhook_triggers`` and ``webhook_deliveries`` tables, on
    ``db``'s connection."""

    def __init__(self, db: Database) -> None:
        self.db = db
        with db.tx() as conn:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            # a database from before workspaces (issue 59): its webhooks hear every one
            columns = {r[1] for r in conn.execute("PRAGMA table_info(webhooks)")}
            if "workspace_id" not in columns:
                conn.execute("ALTER TABLE webhooks ADD COLUMN workspace_id INTEGER")

    def _rows(self, sql: str, *args: Any) -> list[dict[str, Any]]:
        with self.db.tx() as conn:  # its rows are sqlite3.Row (Database's row_factory)
            return [dict(r) for r in conn.execute(sql, args).fetchall()]

    # --- webhooks -------------------------------------------------------------------------

    def create_webhook(self, name: str, url: str, webhook_type: str, mode: str,
                       signing_key: str, triggers: Iterable[tuple[str, dict[str, Any]]],
                       workspace_id: int | None = None) -> int:
        """A webhook and its triggers, all or nothing; its id. ``workspace_id``: the
        workspace whose experiments it hears (None: every workspace's).
        ``sqlite3.IntegrityError`` when the name is taken."""
        with self.db.tx() as conn:
            cur = conn.execute(
                "INSERT INTO webhooks (name, url, webhook_type, mode, signing_key, created,"
                " workspace_id) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (name, url, webhook_type, mode, signing_key, time.time(), workspace_id))
            assert cur.lastrowid is not None  # an INSERT was executed on this cursor
            wid = int(cur.lastrowid)
            conn.executemany(
                "INSERT INTO webhook_triggers (webhook_id, trigger_type, condition)"
                " VALUES (?, ?, ?)",
                [(wid, kind, json.dumps(cond, sort_keys=True)) for kind, cond in triggers])
        return wid

    def webhooks(self, with_key: bool = False) -> list[dict[str, Any]]:
        """Every webhook with its ``triggers``, oldest first; the signing key only when
        ``with_key`` (the deliverer's, never an answer's)."""
        columns = _PUBLIC + (", signing_key" if with_key else "")
        hooks = self._rows(f"SELECT {columns} FROM webhooks ORDER BY id")
        triggers: dict[int, list[dict[str, Any]]] = {}
        for t in self._rows("SELECT * FROM webhook_triggers ORDER BY id"):
            t["condition"] = json.loads(t["condition"])
            triggers.setdefault(t["webhook_id"], []).append(t)
        for h in hooks:
            h["triggers"] = triggers.get(h["id"], [])
        return hooks

    def webhook(self, webhook_id: int, with_key: bool = False) -> dict[str, Any] | None:
        """One webhook with its ``triggers``; None: no such webhook."""
        found = [h for h in self.webhooks(with_key) if h["id"] == webhook_id]
        return found[0] if found else None

    def delete_webhook(self, webhook_id: int) -> bool:
        """Whether there was such a webhook (its triggers and deliveries go with it)."""
        with self.db.tx() as conn:
            conn.execute("DELETE FROM webhook_pending WHERE delivery_id IN (SELECT id FROM"
                         " webhook_deliveries WHERE webhook_id = ?)", (webhook_id,))
            conn.execute("DELETE FROM webhook_deliveries WHERE webhook_id = ?", (webhook_id,))
            return conn.execute("DELETE FROM webhooks WHERE id = ?",
                                (webhook_id,)).rowcount > 0

    def set_webhook_url(self, webhook_id: int, url: str) -> bool:
        """Determined's PatchWebhook: a new URL; whether there was such a webhook."""
        with self.db.tx() as conn:
            return conn.execute("UPDATE webhooks SET url = ? WHERE id = ?",
                                (url, webhook_id)).rowcount > 0

    # --- deliveries -----------------------------------------------------------------------

    def add_delivery(self, webhook_id: int, event_id: str, event_type: str,
                     experiment_id: int | None, state: str = "QUEUED",
                     error: str | None = None, body: bytes | None = None) -> int:
        """Record a delivery (QUEUED, or FAILED at once with ``error``); its id. The
        oldest beyond :data:`KEPT_DELIVERIES` are forgotten. ``body``: kept with it until
        it is DELIVERED or FAILED (what a restarted master sends)."""
        now = time.time()
        with self.db.tx() as conn:
            cur = conn.execute(
                "INSERT INTO webhook_deliveries (webhook_id, event_id, event_type,"
                " experiment_id, state, error, created, finished) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (webhook_id, event_id, event_type, experiment_id, state, error, now,
                 now if state == "FAILED" else None))
            assert cur.lastrowid is not None  # an INSERT was executed on this cursor
            did = int(cur.lastrowid)
            if body is not None and state != "FAILED":
                conn.execute("INSERT INTO webhook_pending (delivery_id, body) VALUES (?, ?)",
                             (did, body))
            if did % 100 == 0:
                conn.execute("DELETE FROM webhook_deliveries WHERE id <= ?",
                             (did - KEPT_DELIVERIES,))
        return did

    def update_delivery(self, delivery_id: int, state: str, attempts: int,
                        status_code: int | None, error: str | None) -> None:
        """A delivery's outcome so far (``finished`` stamped once DELIVERED or FAILED)."""
        finished = time.time() if state in ("DELIVERED", "FAILED") else None
        with self.db.tx() as conn:
            conn.execute(
                "UPDATE webhook_deliveries SET state = ?, attempts = ?, status_code = ?,"
                " error = ?, finished = ? WHERE id = ?",
                (state, attempts, status_code, error, finished, delivery_id))
            if finished is not None:  # nothing more to send
                conn.execute("DELETE FROM webhook_pending WHERE delivery_id = ?",
                             (delivery_id,))

    def deliveries(self, webhook_id: int | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """The newest ``limit`` deliveries (of ``webhook_id``, or of every webhook), newest
        first."""
        if webhook_id is None:
            return self._rows("SELECT * FROM webhook_deliveries ORDER BY id DESC LIMIT ?", limit)
        return self._rows("SELECT * FROM webhook_deliveries WHERE webhook_id = ?"
                          " ORDER BY id DESC LIMIT ?", webhook_id, limit)

    def unfinished(self) -> list[dict[str, Any]]:
        """The deliveries a previous master left QUEUED or SENDING with their body kept
        (oldest first): ``id``, ``webhook_id``, ``attempts``, ``body``.

        >>> from det_sdk.master.store import Store
        >>> hooks = WebhookTables(Store(":memory:"))
        >>> wid = hooks.create_webhook("w", "http://127.0.0.1:9/", "DEFAULT", "WORKSPACE", "k",
        ...                            [("CUSTOM", {})])
        >>> did = hooks.add_delivery(wid, "e1", "CUSTOM", None, body=b"{}")
        >>> [(d["id"], d["body"]) for d in hooks.unfinished()] == [(did, b"{}")]
        True
        >>> hooks.update_delivery(did, "DELIVERED", 1, 204, None); hooks.unfinished()
        []
        """
        rows = self._rows(
            "SELECT d.id, d.webhook_id, d.attempts, p.body FROM webhook_deliveries d"
            " JOIN webhook_pending p ON p.delivery_id = d.id"
            " WHERE d.state IN ('QUEUED', 'SENDING') ORDER BY d.id")
        for r in rows:
            r["body"] = bytes(r["body"])
        return rows

    def fail_unfinished(self, why: str) -> int:
        """Mark every delivery a previous master left QUEUED or SENDING without a kept
        body (one recorded before bodies were kept) as FAILED with ``why``; how many."""
        with self.db.tx() as conn:
            return int(conn.execute(
                "UPDATE webhook_deliveries SET state = 'FAILED', error = ?, finished = ?"
                " WHERE state IN ('QUEUED', 'SENDING') AND id NOT IN"
                " (SELECT delivery_id FROM webhook_pending)", (why, time.time())).rowcount)
