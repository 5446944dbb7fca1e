"""``det rbac ...``: Determined 0.38's role commands over the master's roles (issue 59):
``list-roles``, ``my-permissions``, ``list-users-roles USER``, ``describe-role ROLE``,
``assign-role ROLE -u USER [-w WS]`` and ``unassign-role`` (same form). Without ``-w`` a
role is given cluster-wide. det_sdk has no groups: ``-g`` and ``list-groups-roles`` are
refused.

>>> sorted(COMMANDS)  # doctest: +NORMALIZE_WHITESPACE
['assign-role', 'describe-role', 'list-groups-roles', 'list-roles', 'list-users-roles',
 'my-permissions', 'unassign-role']
"""

from __future__ import annotations

from argparse import Namespace

from det_sdk.cli import common

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["COMMANDS"]

_ROLE_HEADERS = ["Role ID", "Name", "Permissions"]
_ASSIGN_HEADERS = ["Role", "Workspace", "Cluster-wide"]


def _roles(client: Any) -> list[dict[str, Any]]:
    return list(client.request("POST", "/api/v1/roles/search")["roles"])


def _ws_names(client: Any) -> dict[int, str]:
    return {w["id"]: w["name"] for w in client.request("GET", "/api/v1/workspaces")[
        "workspaces"]}


def _print_assignments(args: Namespace, client: Any, rows: list[dict[str, Any]]) -> None:
    from det_sdk.cli.render import print_json, print_rows

    if args.json:
        print_json(rows)
        return
    names = _ws_names(client)
    print_rows(_ASSIGN_HEADERS, [[a["role"]["name"],
                                  names.get(a["scopeWorkspaceId"], a["scopeWorkspaceId"])
                                  if a["scopeWorkspaceId"] else "", a["scopeCluster"]]
                                 for a in rows], False)


def rbac_list_roles(args: Namespace) -> int:
    """``det rbac list-roles [--exclude-global-roles]``."""
    from det_sdk.cli.render import print_json, print_rows

    rows = _roles(common.connect(args))
    if args.exclude_global_roles:
        rows = [r for r in rows if r["scopeTypeMask"]["workspace"]]
    if args.json:
        print_json(rows)
    else:
        print_rows(_ROLE_HEADERS, [[r["roleId"], r["name"],
                                    ", ".join(p["name"] for p in r["permissions"])]
                                   for r in rows], False)
    return 0


def rbac_describe_role(args: Namespace) -> int:
    """``det rbac describe-role ROLE``."""
    from det_sdk.cli.render import print_json, print_rows

    role = _role(common.connect(args), args.role_name)
    if args.json:
        print_json(role)
    else:
        print_rows(["Permission"], [[p["name"]] for p in role["permissions"]], False)
    return 0


def rbac_my_permissions(args: Namespace) -> int:
    """``det rbac my-permissions``: the caller's roles, where."""
    client = common.connect(args)
    summary = client.request("GET", "/api/v1/permissions/summary")
    if summary["admin"] and not args.json:
        print("admin: every permission everywhere")
    _print_assignments(args, client, summary["assignments"])
    return 0


def rbac_list_users_roles(args: Namespace) -> int:
    """``det rbac list-users-roles USER``."""
    client = common.connect(args)
    uid = client.request("GET", f"/api/v1/users/{args.username}/by-username")["user"]["id"]
    _print_assignments(args, client,
                       client.request("GET", f"/api/v1/roles/search/by-user/{uid}")["roles"])
    return 0


def _role(client: Any, name: str) -> dict[str, Any]:
    for role in _roles(client):
        if role["name"].lower() == name.lower():
            return role
    raise common.UsageError(f"role: no role {name!r}; the roles are "
                          + ", ".join(r["name"] for r in _roles(client)))


def _assignment(args: Namespace, verb: str) -> int:
    if not args.username_to_assign:
        raise common.UsageError("-u/--username-to-assign: the user to give the role to")
    client = common.connect(args)
    role = _role(client, args.role_name)
    uid = client.request("GET", f"/api/v1/users/{args.username_to_assign}/by-username"
                         )["user"]["id"]
    scope: dict[str, Any] = {"role": {"roleId": role["roleId"]}}
    if args.workspace_name:
        scope["scopeWorkspaceId"] = common.workspace_by_name(client, args.workspace_name)["id"]
    client.request("POST", f"/api/v1/roles/{verb}", json={
        "userRoleAssignments": [{"userId": uid, "roleAssignment": scope}]})
    where = (f"workspace {args.workspace_name}" if args.workspace_name else "the cluster")
    done = "assigned to" if verb == "add-assignments" else "removed from"
    print(f"Role {role['name']} {done} user {args.username_to_assign} on {where}.")
    return 0


def rbac_assign_role(args: Namespace) -> int:
    """``det rbac assign-role ROLE -u USER [-w WORKSPACE]``."""
    return _assignment(args, "add-assignments")


def rbac_unassign_role(args: Namespace) -> int:
    """``det rbac unassign-role ROLE -u USER [-w WORKSPACE]``."""
    return _assignment(args, "remove-assignments")


_NO_GROUPS = "det_sdk has no user groups: assign a role to each user with -u"

_ASSIGN_ARGS = [("role_name", {"help": "name of the role"}),
                (("-w", "--workspace-name"), {"help": "the workspace (none: cluster-wide)"}),
                (("-u", "--username-to-assign"), {"help": "the user"}),
                (("-g", "--group-name-to-assign"), common.refused(_NO_GROUPS, True))]

#: ``det rbac``'s verbs (det_sdk.cli.main assembles the nouns' tables)
COMMANDS: dict[str, Any] = {
    "list-roles": (rbac_list_roles, "list roles",
                   [("--exclude-global-roles", {"action": "store_true",
                                                "help": "leave out cluster-only roles"})]),
    "my-permissions": (rbac_my_permissions, "list the roles the current user has", []),
    "list-users-roles": (rbac_list_users_roles, "list a user's roles",
                         [("username", {"help": "the user"})]),
    "list-groups-roles": (common.refusal(_NO_GROUPS), "refused: det_sdk has no groups",
                          [("group_name", {"help": "the group"})]),
    "describe-role": (rbac_describe_role, "describe a role",
                      [("role_name", {"help": "name of the role"})]),
    "assign-role": (rbac_assign_role, "assign a role to a user", _ASSIGN_ARGS),
    "unassign-role": (rbac_unassign_role, "unassign a role from a user", _ASSIGN_ARGS),
}
