"""Determined's predefined roles (issue 59): what each may do, :data:`ROLES`, and the
decision :func:`workspace_permissions` that det_sdk.master.permissions' one check asks.

Roles are opt-in per workspace: a workspace without any assignment (the Uncategorized one
included, until someone is given a role on it) keeps the rules from before roles (every
user sees it, changes their own). Once a workspace has an assignment, only admins,
ClusterAdmins, its creator and users with a role on it see it; each role's row of
:data:`ROLES` decides what they may change there.

>>> sorted(ROLES["Viewer"])
['PERMISSION_TYPE_VIEW_WORKSPACE']
>>> "PERMISSION_TYPE_UPDATE_EXPERIMENT" in ROLES["Editor"]
True
>>> role_named("editor")
'Editor'
"""

from __future__ import annotations

from typing import Any

from det_sdk.master.errors import InvalidRequest, NotFound
from det_sdk.master.store.roles import CLUSTER

__all__ = [
    "ALL",
    "ASSIGN_ROLES",
    "CLUSTER",
    "CREATE_EXPERIMENT",
    "ROLES",
    "ROLE_IDS",
    "UPDATE_EXPERIMENT",
    "UPDATE_WORKSPACE",
    "VIEW",
    "Roles",
    "check_visible",
    "hidden_error",
    "hidden_workspaces",
    "is_cluster_admin",
    "may_create_in",
    "role_named",
    "visible_projects",
    "workspace_of",
    "workspace_permissions",
]

#: Determined's permission names, those det_sdk's routes check
VIEW = "PERMISSION_TYPE_VIEW_WORKSPACE"
CREATE_EXPERIMENT = "PERMISSION_TYPE_CREATE_EXPERIMENT"
UPDATE_EXPERIMENT = "PERMISSION_TYPE_UPDATE_EXPERIMENT"
UPDATE_WORKSPACE = "PERMISSION_TYPE_UPDATE_WORKSPACE"
ASSIGN_ROLES = "PERMISSION_TYPE_ASSIGN_ROLES"
ADMINISTRATE_USER = "PERMISSION_TYPE_ADMINISTRATE_USER"

_EDITOR = frozenset({VIEW, CREATE_EXPERIMENT, UPDATE_EXPERIMENT})
_WORKSPACE_ADMIN = _EDITOR | {UPDATE_WORKSPACE, ASSIGN_ROLES}

#: role -> what it may do. ClusterAdmin is assigned cluster-wide only and is an admin's
#: equal; the others are held on a workspace (or cluster-wide: on every workspace)
ROLES: dict[str, frozenset[str]] = {
    "ClusterAdmin": _WORKSPACE_ADMIN | {ADMINISTRATE_USER},
    "WorkspaceAdmin": _WORKSPACE_ADMIN,
    "Editor": _EDITOR,
    "Viewer": frozenset({VIEW}),
}
ALL = ROLES["ClusterAdmin"]
#: det_sdk's role ids (Determined numbers its own; the CLI goes by name)
ROLE_IDS = {name: i for i, name in enumerate(ROLES, start=1)}


def role_named(name: str) -> str:
    """The role called ``name`` (any case); InvalidRequest naming the roles if none."""
    for role in ROLES:
        if role.lower() == name.strip().lower():
            return role
    raise InvalidRequest(f"role: no role {name!r}; the roles are {', '.join(ROLES)}")


def is_cluster_admin(store: Any, user_id: int | None) -> bool:
    """Whether ``user_id`` holds ClusterAdmin (cluster-wide)."""
    return user_id is not None and any(
        a["role"] == "ClusterAdmin" for a in store.roles_of(user_id))


def workspace_permissions(store: Any, p: Any, ws_id: int) -> frozenset[str] | None:
    """What principal ``p`` (a user) may do in workspace ``ws_id``: None while the
    workspace has no assignment (the rules from before roles hold), else the
    permissions, empty when ``p`` may not even see it (answered as not found)."""
    if ws_id not in store.workspaces_with_roles():
        return None
    if p.admin:
        return ALL
    held: set[str] = set()
    for a in store.roles_of(p.user_id):
        if a["workspace_id"] in (0, ws_id):
            held |= ROLES.get(a["role"], frozenset())
    ws = store.workspace(ws_id)
    if ws is not None and ws.get("owner_id") == p.user_id:
        held |= _WORKSPACE_ADMIN  # its creator keeps it (Determined's WorkspaceCreator)
    return frozenset(held)


def workspace_of(store: Any, kind: str, ident: str) -> int | None:
    """The workspace of ``kind`` (experiment, trial, project, workspace) ``ident``;
    None: no such thing, or a kind that is in no workspace (jobs, models, commands)."""
    if not ident.isdigit():
        return None
    i = int(ident)
    if kind == "trial":
        trial = store.trial(i)
        if trial is None:
            return None
        kind, i = "experiment", int(trial["experiment_id"])
    if kind == "experiment":
        project = store.experiment_project(i)
        if project is None:
            return None
        kind, i = "project", project
    if kind == "project":
        found = store.project(i)
        return None if found is None else int(found["workspace_id"])
    if kind == "workspace":
        return i if store.workspace(i) is not None else None
    return None


def hidden_workspaces(store: Any, p: Any) -> set[int]:
    """The workspaces principal ``p`` may not see (empty while nobody holds a role).

    >>> from det_sdk.master.store import Store
    >>> hidden_workspaces(Store(":memory:"), None)
    set()
    """
    if not store.any_role_assignments() or p is None or p.admin:
        return set()
    out = set()
    for ws in store.workspaces_with_roles():
        perms = workspace_permissions(store, p, ws)
        if perms is not None and VIEW not in perms:  # (empty: sees nothing there)
            out.add(ws)
    return out


def visible_projects(store: Any, p: Any, projects: list[int] | None) -> list[int] | None:
    """``projects`` (None: all) less those in workspaces ``p`` may not see; None while
    ``p`` may see every workspace (a list filter's argument, det_sdk.master.pages).

    >>> from det_sdk.master.store import Store
    >>> visible_projects(Store(":memory:"), None, None) is None
    True
    """
    hidden = hidden_workspaces(store, p)
    if not hidden:
        return projects
    return [pr["id"] for pr in store.projects() if pr["workspace_id"] not in hidden
            and (projects is None or pr["id"] in projects)]


def check_visible(store: Any, p: Any, kind: str, idents: list[int]) -> None:
    """NotFound (as for none such) for the first of ``kind`` (experiment, trial)
    ``idents`` that ``p`` may not see.

    >>> from det_sdk.master.store import Store
    >>> check_visible(Store(":memory:"), None, "experiment", [1])
    """
    hidden = hidden_workspaces(store, p)
    for ident in idents if hidden else ():
        if workspace_of(store, kind, str(ident)) in hidden:
            raise hidden_error(kind, str(ident))


def may_create_in(store: Any, p: Any, project_id: int) -> None:
    """Raise unless ``p`` may file an experiment in project ``project_id``: NotFound if
    they may not see its workspace, Forbidden naming the permission if they may see it
    only. A workspace without roles takes anyone's."""
    from det_sdk.master.permissions import Forbidden

    ws = workspace_of(store, "project", str(project_id))
    if ws is None or p is None or p.admin or not store.any_role_assignments():
        return
    perms = workspace_permissions(store, p, ws)
    if perms is None or CREATE_EXPERIMENT in perms:
        return
    if VIEW not in perms:
        raise hidden_error("project", str(project_id))
    raise Forbidden(f"user {p.username!r} lacks {CREATE_EXPERIMENT} on workspace {ws}")


def hidden_error(kind: str, ident: str) -> NotFound:
    """The answer to a caller who may not see ``kind`` ``ident``: the same as none such."""
    return NotFound(f"no {kind} {ident}")


class Roles:
    """The role rules over the master's tables (its routes' and the permission check's
    one way to them: ``Master.roles``); each method is this module's function of the
    same name, or the store's assignment table's.

    >>> from det_sdk.master.store import Store
    >>> Roles(Store(":memory:")).hidden_workspaces(None)
    set()
    """

    def __init__(self, store: Any) -> None:
        self._store = store

    def is_cluster_admin(self, user_id: int | None) -> bool:
        return is_cluster_admin(self._store, user_id)

    def workspace_permissions(self, p: Any, ws_id: int) -> frozenset[str] | None:
        return workspace_permissions(self._store, p, ws_id)

    def workspace_of(self, kind: str, ident: str) -> int | None:
        return workspace_of(self._store, kind, ident)

    def hidden_workspaces(self, p: Any) -> set[int]:
        return hidden_workspaces(self._store, p)

    def visible_projects(self, p: Any, projects: list[int] | None) -> list[int] | None:
        return visible_projects(self._store, p, projects)

    def check_visible(self, p: Any, kind: str, idents: list[int]) -> None:
        check_visible(self._store, p, kind, idents)

    def may_create_in(self, p: Any, project_id: int) -> None:
        may_create_in(self._store, p, project_id)

    def workspace(self, ws_id: int) -> dict[str, Any] | None:
        return self._store.workspace(ws_id)

    def roles_of(self, user_id: int) -> list[dict[str, Any]]:
        return self._store.roles_of(user_id)

    def assign_role(self, user_id: int, role: str, ws_id: int) -> bool:
        return bool(self._store.assign_role(user_id, role, ws_id))

    def unassign_role(self, user_id: int, role: str, ws_id: int) -> bool:
        return bool(self._store.unassign_role(user_id, role, ws_id))
