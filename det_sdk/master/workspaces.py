"""Workspaces and projects as the API shows them (Determined 0.38's ``v1Workspace`` and
``v1Project`` fields that det_sdk has), and the project a new experiment goes to.

>>> from det_sdk.master.store import Store
>>> s = Store(":memory:")
>>> project_for(s, None, {"name": "x"})
1
>>> try:
...     project_for(s, None, {"project": "p"})
... except InvalidRequest as err:
...     print(str(err)[:46])
workspace: the config names a project but no w
"""

from __future__ import annotations

from typing import Any

from det_sdk.master.errors import InvalidRequest, NotFound
from det_sdk.master.store.workspaces import DEFAULT_PROJECT

__all__ = ["Workspaces", "project_for", "project_out", "workspace_out"]


def workspace_out(w: dict[str, Any], names: dict[int, str]) -> dict[str, Any]:
    """Workspace row ``w`` as the API shows it; ``names``: user names by id.

    >>> w = {"id": 2, "name": "a", "archived": False, "immutable": False,
    ...      "owner_id": 1, "num_projects": 0, "num_experiments": 0}
    >>> workspace_out(w, {1: "x"})["username"]
    'x'
    """
    return {"id": w["id"], "name": w["name"], "archived": w["archived"],
            "immutable": w["immutable"], "userId": w["owner_id"] or 1,
            "username": names.get(w["owner_id"] or 1, ""),
            "numProjects": w["num_projects"], "numExperiments": w["num_experiments"],
            "state": "WORKSPACE_STATE_UNSPECIFIED"}


def project_out(p: dict[str, Any], names: dict[int, str]) -> dict[str, Any]:
    """Project row ``p`` as the API shows it; ``names``: user names by id.

    >>> project_out({"id": 2, "name": "a", "workspace_id": 1, "workspace_name": "w",
    ...              "description": "", "archived": False, "immutable": False,
    ...              "owner_id": None, "num_experiments": 3,
    ...              "num_active_experiments": 1}, {1: "x"})["numExperiments"]
    3
    """
    return {"id": p["id"], "name": p["name"], "workspaceId": p["workspace_id"],
            "workspaceName": p["workspace_name"], "description": p["description"],
            "archived": p["archived"], "immutable": p["immutable"],
            "userId": p["owner_id"] or 1, "username": names.get(p["owner_id"] or 1, ""),
            "numExperiments": p["num_experiments"],
            "numActiveExperiments": p["num_active_experiments"],
            "key": "", "state": "WORKSPACE_STATE_UNSPECIFIED"}


def project_for(store: Any, project_id: int | None, raw_config: Any) -> int:
    """The project a new experiment goes to, as Determined decides: ``project_id`` if
    given, else the config's ``workspace`` and ``project`` names (both or neither), else
    the default project, Uncategorized. Raises NotFound, InvalidRequest or Conflict
    (archived) naming the field. ``store``: a det_sdk.master.store.Store."""
    if project_id is not None:
        return int(store.open_project(project_id)["id"])
    config = raw_config if isinstance(raw_config, dict) else {}
    ws_name, proj_name = config.get("workspace"), config.get("project")
    if ws_name is None and proj_name is None:
        return DEFAULT_PROJECT
    for field, value in (("workspace", ws_name), ("project", proj_name)):
        if value is not None and not isinstance(value, str):
            raise InvalidRequest(f"{field}: expected a name (a string), got "
                                 f"{type(value).__name__}")
    if not ws_name or not proj_name:
        missing = "workspace" if not ws_name else "project"
        given = "project" if missing == "workspace" else "workspace"
        raise InvalidRequest(f"{missing}: the config names a {given} but no {missing}: "
                             "give both (or neither)")
    ws = store.workspace_by_name(ws_name)
    if ws is None:
        raise NotFound(f"workspace: no workspace named {ws_name!r}")
    found = store.project_by_name(ws["id"], proj_name)
    if found is None:
        raise NotFound(f"project: workspace {ws_name!r} has no project named {proj_name!r}")
    return int(store.open_project(found["id"])["id"])


class Workspaces:
    """The master's workspaces and projects (its routes' one way to them: ``Master
    .workspaces``), over the store's tables (det_sdk.master.store.workspaces).

    >>> from det_sdk.master.store import Store
    >>> book = Workspaces(Store(":memory:"))
    >>> book.workspace(1)["name"], book.project_for(None, {"name": "x"})
    ('Uncategorized', 1)
    """

    def __init__(self, store: Any) -> None:
        self._store = store

    def workspace(self, ws_id: int) -> dict[str, Any] | None:
        return self._store.workspace(ws_id)

    def workspaces(self) -> list[dict[str, Any]]:
        return self._store.workspaces()

    def project(self, project_id: int) -> dict[str, Any] | None:
        return self._store.project(project_id)

    def projects(self, ws_id: int | None = None) -> list[dict[str, Any]]:
        return self._store.projects(ws_id)

    def user_names(self) -> dict[int, str]:
        return self._store.user_names()

    def create_workspace(self, name: str, owner_id: int | None) -> int:
        return int(self._store.create_workspace(name, owner_id))

    def delete_workspace(self, ws_id: int) -> None:
        self._store.delete_workspace(ws_id)

    def set_workspace_archived(self, ws_id: int, archived: bool) -> None:
        self._store.set_workspace_archived(ws_id, archived)

    def create_project(self, ws_id: int, name: str, description: str,
                       owner_id: int | None) -> int:
        return int(self._store.create_project(ws_id, name, description, owner_id))

    def delete_project(self, project_id: int) -> None:
        self._store.delete_project(project_id)

    def set_project_archived(self, project_id: int, archived: bool) -> None:
        self._store.set_project_archived(project_id, archived)

    def move_experiment(self, exp_id: int, project_id: int) -> None:
        self._store.move_experiment(exp_id, project_id)

    def project_for(self, project_id: int | None, raw_config: Any) -> int:
        """:func:`project_for` over this master's tables."""
        return project_for(self._store, project_id, raw_config)
