"""Role assignments (issue 59), table ``role_assignments``: a user holds a role on one
workspace, or cluster-wide (``workspace_id`` 0). What each role may do is
det_sdk.master.roles' table; this module only keeps who holds what.

>>> from det_sdk.master.store import Store
>>> s = Store(":memory:")
>>> s.any_role_assignments()
False
>>> s.assign_role(1, "Viewer", 1)
True
>>> s.assign_role(1, "Viewer", 1)  # already held: nothing changes
False
>>> s.roles_of(1)
[{'role': 'Viewer', 'workspace_id': 1}]
>>> s.unassign_role(1, "Viewer", 1)
True
"""

from __future__ import annotations

import time
from typing import Any

from det_sdk.master.store.database import Database

__all__ = ["CLUSTER", "RoleTables"]

#: the ``workspace_id`` of a cluster-wide assignment
CLUSTER = 0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS role_assignments (
    user_id INTEGER NOT NULL, role TEXT NOT NULL, workspace_id INTEGER NOT NULL,
    created REAL NOT NULL, PRIMARY KEY (user_id, role, workspace_id)
)
"""


class RoleTables(Database):
    """The ``role_assignments`` table (created here: this module owns it)."""

    def __init__(self, path: Any) -> None:
        super().__init__(path)
        with self.tx() as db:
            db.execute(_SCHEMA)

    def assign_role(self, user_id: int, role: str, workspace_id: int) -> bool:
        """Give ``user_id`` ``role`` on ``workspace_id`` (:data:`CLUSTER`: everywhere);
        False if they held it already (two admins assigning at once: one row)."""
        with self.tx() as db:
            cur = db.execute("INSERT OR IGNORE INTO role_assignments (user_id, role,"
                             " workspace_id, created) VALUES (?, ?, ?, ?)",
                             (user_id, role, workspace_id, time.time()))
            return bool(cur.rowcount)

    def unassign_role(self, user_id: int, role: str, workspace_id: int) -> bool:
        """Take ``role`` on ``workspace_id`` from ``user_id``; False if not held."""
        with self.tx() as db:
            cur = db.execute("DELETE FROM role_assignments WHERE user_id = ? AND role = ?"
                             " AND workspace_id = ?", (user_id, role, workspace_id))
            return bool(cur.rowcount)

    def roles_of(self, user_id: int) -> list[dict[str, Any]]:
        """``user_id``'s assignments: ``role`` and ``workspace_id`` each."""
        return [dict(r) for r in self._all(
            "SELECT role, workspace_id FROM role_assignments WHERE user_id = ?"
            " ORDER BY workspace_id, role", user_id)]

    def role_assignments(self) -> list[dict[str, Any]]:
        """Every assignment: ``user_id``, ``role``, ``workspace_id``."""
        return [dict(r) for r in self._all(
            "SELECT user_id, role, workspace_id FROM role_assignments"
            " ORDER BY workspace_id, user_id, role")]

    def any_role_assignments(self) -> bool:
        """Whether anyone holds any role (none: every check is the one from before roles)."""
        return self._one("SELECT 1 AS x FROM role_assignments LIMIT 1") is not None

    def workspaces_with_roles(self) -> set[int]:
        """The workspaces that have at least one assignment (roles are opt-in)."""
        return {int(r["workspace_id"]) for r in self._all(
            "SELECT DISTINCT workspace_id FROM role_assignments WHERE workspace_id != ?",
            CLUSTER)}
