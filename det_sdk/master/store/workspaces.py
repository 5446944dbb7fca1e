"""Workspaces and projects (tables ``workspaces`` and ``projects``), as Determined 0.38
keeps them: every experiment is in one project (``experiments.project_id``), every
project in one workspace.

Workspace 1 and its project 1 are Determined's defaults, both named "Uncategorized" and
immutable: they can be neither deleted nor archived, nor renamed. An experiment made
before workspaces existed (its ``project_id`` NULL) is moved into project 1 when the
database opens, as Determined's migration put existing experiments there.

>>> from det_sdk.master.store import Store
>>> s = Store(":memory:")
>>> [w["name"] for w in s.workspaces()]
['Uncategorized']
>>> ws = s.create_workspace("vision", owner_id=1)
>>> pid = s.create_project(ws, "mnist", "", owner_id=1)
>>> s.project(pid)["workspace_id"] == ws
True
"""

from __future__ import annotations

import time
from typing import Any

from det_sdk.master.errors import Conflict, InvalidRequest, NotFound
from det_sdk.master.store.database import Database, inserted

__all__ = ["DEFAULT_PROJECT", "DEFAULT_WORKSPACE", "UNCATEGORIZED", "WorkspaceTables"]

#: the default workspace's and project's id and name (Determined's)
DEFAULT_WORKSPACE = 1
DEFAULT_PROJECT = 1
UNCATEGORIZED = "Uncategorized"

# Created here, not in database._SCHEMA: this module owns its tables and their one
# migration (the experiments' project column), so an older database gains them on open.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS workspaces (
    id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL UNIQUE,
    archived INTEGER NOT NULL DEFAULT 0, immutable INTEGER NOT NULL DEFAULT 0,
    owner_id INTEGER, created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS projects (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    workspace_id INTEGER NOT NULL REFERENCES workspaces(id), name TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '', archived INTEGER NOT NULL DEFAULT 0,
    immutable INTEGER NOT NULL DEFAULT 0, owner_id INTEGER, created REAL NOT NULL,
    UNIQUE (workspace_id, name)
);
"""

_NAME_MAX = 128


def _checked_name(name: str, what: str) -> str:
    """``name`` stripped; InvalidRequest if empty or too long.

    >>> _checked_name(" a ", "workspace")
    'a'
    """
    stripped = name.strip()
    if not stripped or len(stripped) > _NAME_MAX:
        raise InvalidRequest(f"name: a {what}'s name must be 1 to {_NAME_MAX} characters, "
                             "not blank")
    return stripped


def _flags(row: dict[str, Any] | None) -> dict[str, Any] | None:
    if row is None:
        return None
    return {**row, "archived": bool(row["archived"]), "immutable": bool(row["immutable"])}


class WorkspaceTables(Database):
    """The ``workspaces`` and ``projects`` tables, and which project each experiment is in."""

    def __init__(self, path: Any) -> None:
        super().__init__(path)
        now = time.time()
        with self.tx() as db:
            # one statement at a time: executescript would commit the transaction
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            have = {r["name"] for r in db.execute("PRAGMA table_info(experiments)")}
            if "project_id" not in have:
                db.execute("ALTER TABLE experiments ADD COLUMN project_id INTEGER")
            db.execute("INSERT OR IGNORE INTO workspaces (id, name, immutable, created)"
                       " VALUES (?, ?, 1, ?)", (DEFAULT_WORKSPACE, UNCATEGORIZED, now))
            db.execute("INSERT OR IGNORE INTO projects (id, workspace_id, name, immutable,"
                       " created) VALUES (?, ?, ?, 1, ?)",
                       (DEFAULT_PROJECT, DEFAULT_WORKSPACE, UNCATEGORIZED, now))
            # experiments from before workspaces: Determined's migration put them here
            db.execute("UPDATE experiments SET project_id = ? WHERE project_id IS NULL",
                       (DEFAULT_PROJECT,))
            db.execute("CREATE INDEX IF NOT EXISTS experiments_by_project"
                       " ON experiments(project_id)")

    # --- workspaces ----------------------------------------------------------------------

    def workspaces(self) -> list[dict[str, Any]]:
        """Every workspace by id, each with ``num_projects`` and ``num_experiments``."""
        rows = self._all(
            "SELECT w.*, (SELECT COUNT(*) FROM projects p WHERE p.workspace_id = w.id)"
            " AS num_projects, (SELECT COUNT(*) FROM experiments e JOIN projects p"
            " ON e.project_id = p.id WHERE p.workspace_id = w.id) AS num_experiments"
            " FROM workspaces w ORDER BY w.id")
        return [r for r in (_flags(r) for r in rows) if r is not None]

    def workspace(self, ws_id: int) -> dict[str, Any] | None:
        return next((w for w in self.workspaces() if w["id"] == ws_id), None)

    def workspace_by_name(self, name: str) -> dict[str, Any] | None:
        return next((w for w in self.workspaces() if w["name"] == name), None)

    def create_workspace(self, name: str, owner_id: int | None) -> int:
        """A new workspace named ``name`` (unique); its id."""
        name = _checked_name(name, "workspace")
        with self.tx() as db:
            if db.execute("SELECT 1 FROM workspaces WHERE name = ?", (name,)).fetchone():
                raise Conflict(f"name: a workspace named {name!r} already exists")
            return inserted(db.execute(
                "INSERT INTO workspaces (name, owner_id, created) VALUES (?, ?, ?)",
                (name, owner_id, time.time())))

    def _mutable_workspace(self, db: Any, ws_id: int, verb: str) -> None:
        found = db.execute("SELECT immutable FROM workspaces WHERE id = ?",
                           (ws_id,)).fetchone()
        if found is None:
            raise NotFound(f"workspace {ws_id} not found")
        if found["immutable"]:
            raise Conflict(f"workspace ({ws_id}) is the default workspace: it cannot be "
                           f"{verb}")

    def set_workspace_archived(self, ws_id: int, archived: bool) -> None:
        """Archive or unarchive (Determined: archived, it takes no new projects or
        experiments; its projects are left as they are)."""
        with self.tx() as db:
            self._mutable_workspace(db, ws_id, "archived" if archived else "unarchived")
            db.execute("UPDATE workspaces SET archived = ? WHERE id = ?",
                       (int(archived), ws_id))

    def delete_workspace(self, ws_id: int) -> None:
        """Delete an empty workspace and its empty projects: Conflict if any of its
        projects holds an experiment (move or delete them first), or if it is the
        default."""
        with self.tx() as db:
            self._mutable_workspace(db, ws_id, "deleted")
            (n,) = db.execute("SELECT COUNT(*) FROM experiments e JOIN projects p"
                              " ON e.project_id = p.id WHERE p.workspace_id = ?",
                              (ws_id,)).fetchone()
            if n:
                raise Conflict(f"workspace ({ws_id}) holds {n} experiment(s): move or "
                               "delete them first (det e move, det e delete)")
            db.execute("DELETE FROM projects WHERE workspace_id = ?", (ws_id,))
            db.execute("DELETE FROM workspaces WHERE id = ?", (ws_id,))

    # --- projects ------------------------------------------------------------------------

    def projects(self, ws_id: int | None = None) -> list[dict[str, Any]]:
        """The projects (of workspace ``ws_id``, or all) by id, each with its workspace's
        name, ``num_experiments`` and ``num_active_experiments``."""
        where, args = ("WHERE p.workspace_id = ?", (ws_id,)) if ws_id is not None else ("", ())
        rows = self._all(
            "SELECT p.*, w.name AS workspace_name,"
            " (SELECT COUNT(*) FROM experiments e WHERE e.project_id = p.id)"
            " AS num_experiments, (SELECT COUNT(*) FROM experiments e WHERE"
            " e.project_id = p.id AND e.state IN ('ACTIVE', 'PAUSED', 'STOPPING_CANCELED',"
            " 'STOPPING_COMPLETED', 'STOPPING_ERROR')) AS num_active_experiments"
            f" FROM projects p JOIN workspaces w ON p.workspace_id = w.id {where}"
            " ORDER BY p.id", *args)
        return [r for r in (_flags(r) for r in rows) if r is not None]

    def project(self, project_id: int) -> dict[str, Any] | None:
        return next((p for p in self.projects() if p["id"] == project_id), None)

    def project_by_name(self, ws_id: int, name: str) -> dict[str, Any] | None:
        return next((p for p in self.projects(ws_id) if p["name"] == name), None)

    def create_project(self, ws_id: int, name: str, description: str,
                       owner_id: int | None) -> int:
        """A new project in workspace ``ws_id`` (its name unique there); its id."""
        name = _checked_name(name, "project")
        with self.tx() as db:
            ws = db.execute("SELECT archived FROM workspaces WHERE id = ?",
                            (ws_id,)).fetchone()
            if ws is None:
                raise NotFound(f"workspace {ws_id} not found")
            if ws["archived"]:
                raise Conflict(f"workspace ({ws_id}) is archived and cannot add new projects")
            if db.execute("SELECT 1 FROM projects WHERE workspace_id = ? AND name = ?",
                          (ws_id, name)).fetchone():
                raise Conflict(f"name: workspace {ws_id} already has a project named "
                               f"{name!r}")
            return inserted(db.execute(
                "INSERT INTO projects (workspace_id, name, description, owner_id, created)"
                " VALUES (?, ?, ?, ?, ?)", (ws_id, name, description, owner_id, time.time())))

    def _mutable_project(self, db: Any, project_id: int, verb: str) -> Any:
        found = db.execute("SELECT p.immutable, w.archived AS ws_archived FROM projects p"
                           " JOIN workspaces w ON p.workspace_id = w.id WHERE p.id = ?",
                           (project_id,)).fetchone()
        if found is None:
            raise NotFound(f"project {project_id} not found")
        if found["immutable"]:
            raise Conflict(f"project ({project_id}) is the default project: it cannot be "
                           f"{verb}")
        return found

    def set_project_archived(self, project_id: int, archived: bool) -> None:
        """Archive or unarchive a project (not in an archived workspace: Determined's
        "This project belongs to an archived workspace")."""
        with self.tx() as db:
            found = self._mutable_project(db, project_id,
                                          "archived" if archived else "unarchived")
            if found["ws_archived"]:
                raise Conflict(f"project ({project_id}) belongs to an archived workspace: "
                               "unarchive the workspace first")
            db.execute("UPDATE projects SET archived = ? WHERE id = ?",
                       (int(archived), project_id))

    def delete_project(self, project_id: int) -> None:
        """Delete an empty project: Conflict if it holds experiments or is the default."""
        with self.tx() as db:
            self._mutable_project(db, project_id, "deleted")
            (n,) = db.execute("SELECT COUNT(*) FROM experiments WHERE project_id = ?",
                              (project_id,)).fetchone()
            if n:
                raise Conflict(f"project ({project_id}) holds {n} experiment(s): move or "
                               "delete them first (det e move, det e delete)")
            db.execute("DELETE FROM projects WHERE id = ?", (project_id,))

    # --- experiments' projects -----------------------------------------------------------

    def open_project(self, project_id: int) -> dict[str, Any]:
        """Project ``project_id`` if it may take experiments: NotFound if there is none,
        Conflict if it or its workspace is archived."""
        found = self.project(project_id)
        if found is None:
            raise NotFound(f"project_id: project {project_id} not found")
        ws = self.workspace(found["workspace_id"])
        if found["archived"] or (ws is not None and ws["archived"]):
            raise Conflict(f"project_id: project {project_id} (or its workspace) is "
                           "archived: it takes no experiments")
        return found

    def experiment_project(self, exp_id: int) -> int | None:
        """The project experiment ``exp_id`` is in (None: no such experiment)."""
        found = self._one("SELECT project_id FROM experiments WHERE id = ?", exp_id)
        return None if found is None else int(found["project_id"] or DEFAULT_PROJECT)

    def move_experiment(self, exp_id: int, project_id: int) -> None:
        """Put experiment ``exp_id`` into project ``project_id`` (one that may take it)."""
        self.open_project(project_id)  # its errors: not found, archived
        with self.tx() as db:
            # again in the transaction: deleted or archived since (then nothing moves)
            if not db.execute("SELECT 1 FROM projects p JOIN workspaces w ON"
                              " p.workspace_id = w.id WHERE p.id = ? AND p.archived = 0"
                              " AND w.archived = 0", (project_id,)).fetchone():
                raise Conflict(f"destinationProjectId: project {project_id} is gone or "
                               "archived")
            cur = db.execute("UPDATE experiments SET project_id = ? WHERE id = ?",
                             (project_id, exp_id))
            if cur.rowcount == 0:
                raise NotFound(f"experiment {exp_id} not found")
