"""Determined's ``Workspace`` and ``Project`` of the Python SDK over det_sdk's master
(issue 59): what ``client.create_workspace``, ``get_workspace`` and
``list_workspaces`` answer.

>>> w = Workspace(None, {"id": 2, "name": "vision"})
>>> w.id, w.name
(2, 'vision')
"""

from __future__ import annotations

from typing import Any

__all__ = ["Project", "Workspace"]


class Project:
    """A project of a workspace (Determined's ``Project``).

    >>> Project(None, {"id": 3, "name": "mnist", "workspaceId": 2}).workspace_id
    2
    """

    def __init__(self, session: Any, row: dict[str, Any]) -> None:
        self._session = session
        self._hydrate(row)

    def __repr__(self) -> str:
        return f"Project(id={self.id}, name={self.name!r})"

    def _hydrate(self, row: dict[str, Any]) -> None:
        self.id = int(row["id"])
        self.name = str(row["name"])
        self.workspace_id = int(row["workspaceId"])
        self.description = str(row.get("description") or "")
        self.archived = bool(row.get("archived", False))
        self.n_experiments = int(row.get("numExperiments", 0))
        self.n_active_experiments = int(row.get("numActiveExperiments", 0))

    def reload(self) -> None:
        self._hydrate(self._session.request("GET", f"/api/v1/projects/{self.id}")["project"])

    def archive(self) -> None:
        self._session.request("POST", f"/api/v1/projects/{self.id}/archive")
        self.reload()

    def unarchive(self) -> None:
        self._session.request("POST", f"/api/v1/projects/{self.id}/unarchive")
        self.reload()


class Workspace:
    """A workspace (Determined's ``Workspace``): its projects made, listed, found."""

    def __init__(self, session: Any, row: dict[str, Any]) -> None:
        self._session = session
        self.id = int(row["id"])
        self.name = str(row["name"])

    def __repr__(self) -> str:
        return f"Workspace(id={self.id}, name={self.name!r})"

    def list_projects(self) -> list[Project]:
        rows = self._session.request("GET", f"/api/v1/workspaces/{self.id}/projects")
        return [Project(self._session, r) for r in rows["projects"]]

    def get_project(self, project_name: str) -> Project:
        """Its project named ``project_name`` (the master's 404 as a MasterError if none)."""
        from det_sdk.client import MasterError

        rows = self._session.request("GET", f"/api/v1/workspaces/{self.id}/projects",
                                     params={"name": project_name})["projects"]
        if not rows:
            raise MasterError(404, f"workspace {self.name!r} has no project named "
                                   f"{project_name!r} (HTTP 404)")
        return Project(self._session, rows[0])

    def create_project(self, name: str, description: str | None = None) -> Project:
        out = self._session.request("POST", f"/api/v1/workspaces/{self.id}/projects",
                                    json={"name": name, "description": description or ""})
        return Project(self._session, out["project"])

    def delete_project(self, name: str) -> None:
        """Delete its empty project ``name`` (the master refuses one with experiments)."""
        self._session.request("DELETE", f"/api/v1/projects/{self.get_project(name).id}")
