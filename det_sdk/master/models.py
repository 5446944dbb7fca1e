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
from collections.abc import Callable
from typing import Any

from det_sdk.master.errors import Conflict, InvalidRequest, NotFound

__all__ = ["MAX_METADATA_BYTES", "MAX_METADATA_DEPTH", "ModelRegistry", "metadata_problem",
           "registered_checkpoints"]

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

#: a model's name: what a URL path and a shell take without quoting (matched whole:
#: ``$`` alone would let a trailing newline through)
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
#: a model's metadata: nested at most this deep, at most this many bytes as JSON (a
#: deeper value once made every answer listing models fail)
MAX_METADATA_DEPTH = 32
MAX_METADATA_BYTES = 64 * 1024


def metadata_problem(value: Any) -> str | None:
    """What is over the limits in a metadata value (None: nothing), found without
    recursion (a value nested 100,000 deep costs a loop, not the stack).

    >>> metadata_problem({"a": [1, {"b": 2}]}) is None
    True
    >>> metadata_problem(json.loads("[" * 40 + "]" * 40))
    'nested 33 levels deep, over the limit of 32 (MAX_METADATA_DEPTH)'
    """
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (dict, list)):
            if depth > MAX_METADATA_DEPTH:
                return (f"nested {depth} levels deep, over the limit of {MAX_METADATA_DEPTH} "
                        "(MAX_METADATA_DEPTH)")
            stack.extend((c, depth + 1) for c in (v.values() if isinstance(v, dict) else v))
    try:  # what JSON (and so the answers) can carry: no NaN, no infinity
        size = len(json.dumps(value, allow_nan=False).encode())
    except ValueError as err:
        return str(err)
    if size > MAX_METADATA_BYTES:
        return (f"{size} bytes as JSON, over the limit of {MAX_METADATA_BYTES} "
                "(MAX_METADATA_BYTES)")
    return None


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

    def __init__(self, store: Any,
                 checkpoint_stored: Callable[[str], bool] | None = None) -> None:
        """``checkpoint_stored``: whether a checkpoint's files are in its storage
        (``Master.checkpoint_stored``: a folder, or an object store's manifest), to refuse
        registering one whose files are gone; without it only the record is looked up."""
        self.store = store
        self.checkpoint_stored = checkpoint_stored
        with store.tx() as db:
            for sql in _TABLES:
                db.execute(sql)
            # who registered it (issue 59; NULL: the first admin, made before users)
            if "owner_id" not in {r[1] for r in db.execute("PRAGMA table_info(models)")}:
                db.execute("ALTER TABLE models ADD COLUMN owner_id INTEGER")

    def _model_row(self, row: Any) -> dict[str, Any]:
        out = dict(row)
        try:
            meta = json.loads(out["metadata"])
            problem = metadata_problem(meta)
        except (ValueError, RecursionError) as err:
            meta, problem = None, f"not readable: {err}"
        if problem:  # stored before the limits: shown as a note, never an error answer
            meta = {"det_sdk_note": f"this model's metadata is {problem}: not shown; "
                                    "delete the model (det model delete) to recreate it"}
        out["metadata"] = meta
        # its owner by id, shown by the user's current name (Determined's `username`)
        owner = self.store.owner_or_first(out.get("owner_id"))
        out["username"] = self.store.user_names().get(owner, "")
        with self.store.tx() as db:
            out["num_versions"] = db.execute(
                "SELECT COUNT(*) FROM model_versions WHERE model_id = ?", (out["id"],)
            ).fetchone()[0]
        return out

    def create(self, name: str, description: str = "",
               metadata: dict[str, Any] | None = None,
               owner_id: int | None = None) -> dict[str, Any]:
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise InvalidRequest(f"model name {name!r}: expected letters, digits, '.', '_' "
                                 f"or '-' (1-128, starting with a letter or digit)")
        problem = metadata_problem(metadata or {})
        if problem:
            raise InvalidRequest(f"metadata: {problem}")
        meta = json.dumps(metadata or {}, allow_nan=False)
        with self.store.tx() as db:
            if db.execute("SELECT 1 FROM models WHERE name = ?", (name,)).fetchone():
                raise Conflict(f"model {name!r} already exists")
            db.execute("INSERT INTO models (name, description, metadata, created, owner_id) "
                       "VALUES (?, ?, ?, ?, ?)",
                       (name, description or "", meta, time.time(), owner_id))
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
        if ckpt.get("damaged"):
            raise Conflict(f"checkpoint {checkpoint_uuid} is damaged ({ckpt['damaged']}): a "
                           "model version must be one that restores; register another")
        # asked of the checkpoint's storage: an object store's checkpoint is no directory
        if self.checkpoint_stored is not None and not self.checkpoint_stored(checkpoint_uuid):
            raise Conflict(f"checkpoint {checkpoint_uuid}'s files are gone from its storage: a "
                           "model version must be one that restores")
        with self.store.tx() as db:
            (last,) = db.execute("SELECT COALESCE(MAX(version), 0) FROM model_versions "
                                 "WHERE model_id = ?", (model["id"],)).fetchone()
            db.execute("INSERT INTO model_versions (model_id, version, checkpoint_uuid, "
                       "created) VALUES (?, ?, ?, ?)",
                       (model["id"], last + 1, checkpoint_uuid, time.time()))
        return self.version(ident, last + 1)

    def delete(self, ident: str | int) -> dict[str, Any]:
        """Delete a model and its versions (their checkpoints are then kept or dropped by
        retention as any other); the deleted model as it was."""
        model = self.get(ident)
        with self.store.tx() as db:
            db.execute("DELETE FROM model_versions WHERE model_id = ?", (model["id"],))
            db.execute("DELETE FROM models WHERE id = ?", (model["id"],))
        return model

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
