"""Roles (issue 59) as Determined 0.38's RBAC routes: ``POST /api/v1/roles/search``
(list-roles), ``GET /api/v1/roles/search/by-user/{user_id}`` (list-users-roles),
``GET /api/v1/permissions/summary`` (my-permissions), ``POST
/api/v1/roles/add-assignments`` and ``/remove-assignments`` (assign-role,
unassign-role). What each role may do: det_sdk.master.roles.

>>> RoleAssignment(role=RoleRef(roleId=3), scopeWorkspaceId=2).scopeWorkspaceId
2
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from det_sdk import api
from det_sdk.master import roles
from det_sdk.master.core import Master
from det_sdk.master.errors import InvalidRequest, NotFound
from det_sdk.master.permissions import Forbidden
from det_sdk.master.routes.common import Dependency, Id, Principal

__all__ = ["AssignmentsRequest", "RoleAssignment", "RoleRef", "rbac_router"]

_Ident = Annotated[int, Field(strict=True, ge=1, le=api.MAX_INT)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class RoleRef(_Body):
    """Determined's ``v1Role`` as an assignment names it: by id."""

    roleId: _Ident


class RoleAssignment(_Body):
    """Determined's ``v1RoleAssignment``: a role, on a workspace or (none) cluster-wide."""

    role: RoleRef
    scopeWorkspaceId: _Ident | None = None


class UserRoleAssignment(_Body):
    """Determined's ``v1UserRoleAssignment``."""

    userId: _Ident
    roleAssignment: RoleAssignment


class AssignmentsRequest(_Body):
    """Determined's ``v1AssignRolesRequest``/``v1RemoveAssignmentsRequest`` (users only:
    det_sdk has no groups)."""

    userRoleAssignments: list[UserRoleAssignment] = Field(default_factory=list,
                                                          max_length=100)
    groupRoleAssignments: list[Any] = Field(default_factory=list, max_length=0)


def _role_out(name: str) -> dict[str, Any]:
    return {"roleId": roles.ROLE_IDS[name], "name": name,
            "permissions": [{"name": perm} for perm in sorted(roles.ROLES[name])],
            "scopeTypeMask": {"cluster": True, "workspace": name != "ClusterAdmin"}}


def rbac_router(master: Master, user: Dependency) -> APIRouter:
    """The RBAC routes over ``master``."""
    router = APIRouter()
    store = master.roles
    by_id = {i: name for name, i in roles.ROLE_IDS.items()}

    def _assignments(user_id: int) -> list[dict[str, Any]]:
        return [{"role": _role_out(a["role"]),
                 "scopeWorkspaceId": a["workspace_id"] or None,
                 "scopeCluster": a["workspace_id"] == roles.CLUSTER}
                for a in store.roles_of(user_id)]

    def _checked(request: Request, p: Principal, body: AssignmentsRequest
                 ) -> list[tuple[int, str, int]]:
        """Each assignment as (user, role, workspace), all checked before any is kept."""
        # the permission dependency keeps a ClusterAdmin's principal as an admin's
        p = request.scope.get("state", {}).get("det_principal") or p
        out = []
        for a in body.userRoleAssignments:
            master.accounts.user(a.userId)  # 404 naming the user
            role = by_id.get(a.roleAssignment.role.roleId)
            if role is None:
                raise InvalidRequest(f"roleId: no role {a.roleAssignment.role.roleId}; the "
                                     f"roles are {roles.ROLE_IDS}")
            ws = a.roleAssignment.scopeWorkspaceId or roles.CLUSTER
            if ws != roles.CLUSTER and store.workspace(ws) is None:
                raise NotFound(f"scopeWorkspaceId: no workspace {ws}")
            if role == "ClusterAdmin" and ws != roles.CLUSTER:
                raise InvalidRequest("scopeWorkspaceId: ClusterAdmin is assigned "
                                     "cluster-wide only")
            if not p.admin:
                found = None if ws == roles.CLUSTER else store.workspace(ws)
                perms = (store.workspace_permissions(p, ws)
                         if ws != roles.CLUSTER else None)
                creator = found is not None and found.get("owner_id") == p.user_id
                if not creator and (perms is None or roles.ASSIGN_ROLES not in perms):
                    where = "cluster-wide" if ws == roles.CLUSTER else f"on workspace {ws}"
                    raise Forbidden(f"user {p.username!r} lacks {roles.ASSIGN_ROLES} "
                                    f"{where} (admins, ClusterAdmins and the workspace's "
                                    "WorkspaceAdmins and creator have it)")
            out.append((a.userId, role, ws))
        return out

    @router.post("/api/v1/roles/search")
    def list_roles(p: Principal = Depends(user)) -> dict[str, Any]:
        """Every role with its permissions (Determined's SearchRolesAssignableToScope)."""
        return {"roles": [_role_out(name) for name in roles.ROLES]}

    @router.get("/api/v1/roles/search/by-user/{user_id}")
    def roles_of_user(user_id: Id, p: Principal = Depends(user)) -> dict[str, Any]:
        master.accounts.user(user_id)
        return {"roles": _assignments(user_id)}

    @router.get("/api/v1/permissions/summary")
    def my_permissions(request: Request, p: Principal = Depends(user)) -> dict[str, Any]:
        """The caller's roles and assignments (Determined's GetPermissionsSummary)."""
        p = request.scope.get("state", {}).get("det_principal") or p
        return {"admin": p.admin, "assignments": _assignments(p.user_id or 0)}

    @router.post("/api/v1/roles/add-assignments")
    def assign(request: Request, body: AssignmentsRequest,
               p: Principal = Depends(user)) -> dict[str, Any]:
        for uid, role, ws in _checked(request, p, body):
            store.assign_role(uid, role, ws)
        return {}

    @router.post("/api/v1/roles/remove-assignments")
    def unassign(request: Request, body: AssignmentsRequest,
                 p: Principal = Depends(user)) -> dict[str, Any]:
        for uid, role, ws in _checked(request, p, body):
            if not store.unassign_role(uid, role, ws):
                raise NotFound(f"user {uid} holds no {role} "
                               + ("cluster-wide" if ws == roles.CLUSTER else f"on workspace {ws}"))
        return {}

    return router
