"""The model registry the master keeps (Determined's models and model versions): a model
is a name with a description and metadata; each version points at one checkpoint.

Its own tables in the master's database, created on first use, so that the rest of the
store knows nothing of it. Versions count from 1 per model.
"""

from __future__ import annotations

import builtins
import json
import re
import sqlite3
import time
from typing import Any

from det_sdk.master.errors import Conflict, InvalidRequest, NotFound

__all__ = ["ModelRegistry", "registered_checkpoints"]

_TABLES = (
    """CREATE TABLE IF NOT EXISTS models (
        id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL UNIQUE,
        description TEXT NOT NULL DEFAULT '', metadata TEXT NOT NULL DEFAULT '{}',
        created REAL NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS model_versions (
        model_id INTEGER NOT NULL REFERENCES models(id), version INTEGER NOT NULL,
        checkpoint_uuid TEXT NOT NULL, name TEXT NOT NULL DEFAULT '',
        created REAL NOT NULL, PRIMARY KEY (model_id, version))""",
)

#: a model's name: what a URL path and a shell take without quoting
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def registered_checkpoints(store: Any) -> set[str]:
    """The uuids of every checkpoint a model version points at (retention keeps them, as
    Determined does); empty before the registry's tables exist."""
    try:
        with store.tx() as db:
            rows = db.execute("SELECT DISTINCT checkpoint_uuid FROM model_versions").fetchall()
    except sqlite3.OperationalError:  # no such table: no model was ever registered here
        return set()
    return {r[0] for r in rows}


class ModelRegistry:
    """Models and their versions in ``store``'s database (a ``det_sdk.master.store.Store``)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        with store.tx() as db:
            for sql in _TABLES:
                db.execute(sql)

    def _model_row(self, row: Any) -> dict[str, Any]:
        out = dict(row)
        out["metadata"] = json.loads(out["metadata"])
        with self.store.tx() as db:
            out["num_versions"] = db.execute(
                "SELECT COUNT(*) FROM model_versions WHERE model_id = ?", (out["id"],)
            ).fetchone()[0]
        return out

    def create(self, name: str, description: str = "",
               metadata: dict[str, Any] | None = None) -> dict[str, Any]:
        if not NAME.match(name or ""):
            raise InvalidRequest(f"model name {name!r}: expected letters, digits, '.', '_' "
                                 f"or '-' (1-128, starting with a letter or digit)")
        try:  # what JSON (and so the answers) can carry: no NaN, no infinity
            meta = json.dumps(metadata or {}, allow_nan=False)
        except ValueError as err:
            raise InvalidRequest(f"model metadata: {err}") from None
        with self.store.tx() as db:
            if db.execute("SELECT 1 FROM models WHERE name = ?", (name,)).fetchone():
                raise Conflict(f"model {name!r} already exists")
            db.execute("INSERT INTO models (name, description, metadata, created) "
                       "VALUES (?, ?, ?, ?)",
                       (name, description or "", meta, time.time()))
        return self.get(name)

    def get(self, ident: str | int) -> dict[str, Any]:
        """A model by name, or by id (an all-digit identifier that names no model)."""
        with self.store.tx() as db:
            row = db.execute("SELECT * FROM models WHERE name = ?", (str(ident),)).fetchone()
            # an id SQLite can hold (a longer string of digits names no model)
            if row is None and str(ident).isdigit() and int(ident) < 2**63:
                row = db.execute("SELECT * FROM models WHERE id = ?", (int(ident),)).fetchone()
        if row is None:
            raise NotFound(f"no model {ident!r}")
        return self._model_row(row)

    def list(self) -> list[dict[str, Any]]:
        with self.store.tx() as db:
            rows = db.execute("SELECT * FROM models ORDER BY name").fetchall()
        return [self._model_row(r) for r in rows]

    def register(self, ident: str | int, checkpoint_uuid: str) -> dict[str, Any]:
        """The next version of the model, pointing at a checkpoint the master knows."""
        model = self.get(ident)
        ckpt = self.store.checkpoint(checkpoint_uuid)
        if ckpt is None:
            raise NotFound(f"no checkpoint {checkpoint_uuid!r}")
        with self.store.tx() as db:
            (last,) = db.execute("SELECT COALESCE(MAX(version), 0) FROM model_versions "
                                 "WHERE model_id = ?", (model["id"],)).fetchone()
            db.execute("INSERT INTO model_versions (model_id, version, checkpoint_uuid, "
                       "created) VALUES (?, ?, ?, ?)",
                       (model["id"], last + 1, checkpoint_uuid, time.time()))
        return self.version(ident, last + 1)

    # builtins.list: in this class `list` is the method above
    def versions(self, ident: str | int) -> builtins.list[dict[str, Any]]:
        """Every version of the model, oldest first."""
        model = self.get(ident)
        with self.store.tx() as db:
            rows = db.execute("SELECT * FROM model_versions WHERE model_id = ? ORDER BY "
                              "version", (model["id"],)).fetchall()
        return [self._version_row(model, r) for r in rows]

    def version(self, ident: str | int, version: int) -> dict[str, Any]:
        """One version; ``-1``: the latest."""
        versions = self.versions(ident)
        if not versions:
            raise NotFound(f"model {ident!r} has no version")
        if version == -1:
            return versions[-1]
        for v in versions:
            if v["version"] == version:
                return v
        raise NotFound(f"model {ident!r} has no version {version}")

    def _version_row(self, model: dict[str, Any], row: Any) -> dict[str, Any]:
        out = dict(row)
        out["model_name"] = model["name"]
        return out
