"""``det project ...``: Determined 0.38's project commands (issue 59): ``list WS``,
``create WS NAME [--description]``, ``describe WS NAME``, ``delete``, ``archive``,
``unarchive``.

>>> sorted(COMMANDS)
['archive', 'create', 'delete', 'describe', 'list', 'unarchive']
"""

from __future__ import annotations

from argparse import Namespace

from det_sdk.cli import common

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["COMMANDS"]

_HEADERS = ["ID", "Name", "Description", "# Experiments", "# Active Experiments"]


def _print(args: Namespace, projects: list[dict[str, Any]]) -> None:
    from det_sdk.cli.render import print_json, print_rows

    if args.json:
        print_json(projects if len(projects) != 1 or args.action == "list" else projects[0])
        return
    print_rows(_HEADERS, [[p["id"], p["name"], p["description"], p["numExperiments"],
                           p["numActiveExperiments"]] for p in projects], False)


def project_list(args: Namespace) -> int:
    """``det project list WS``: the workspace's projects."""
    client = common.connect(args)
    ws = common.workspace_by_name(client, args.workspace_name)
    rows = client.request("GET", f"/api/v1/workspaces/{ws['id']}/projects")["projects"]
    rows.sort(key=lambda p: p[args.sort_by], reverse=args.order_by == "desc")
    _print(args, rows)
    return 0


def project_create(args: Namespace) -> int:
    client = common.connect(args)
    ws = common.workspace_by_name(client, args.workspace_name)
    made = client.request("POST", f"/api/v1/workspaces/{ws['id']}/projects",
                          json={"name": args.name, "description": args.description or "",
                                "workspaceId": ws["id"]})["project"]
    _print(args, [made])
    return 0


def project_describe(args: Namespace) -> int:
    """The project and its experiments (Determined's "Associated Experiments")."""
    from det_sdk.cli.render import print_rows

    client = common.connect(args)
    project = common.project_by_name(client, args.workspace_name, args.project_name)
    _print(args, [project])
    if args.json:
        return 0
    exps = client.request("GET", "/api/v1/experiments",
                          params={"project_id": project["id"], "limit": 100})["experiments"]
    print("\nAssociated Experiments")
    print_rows(["ID", "Owner", "Name", "State"],
               [[e["id"], e["username"], e["name"] or "", e["state"]] for e in exps], False)
    return 0


def project_delete(args: Namespace) -> int:
    """Refused by the master while it holds experiments (move or delete them first)."""
    client = common.connect(args)
    project = common.project_by_name(client, args.workspace_name, args.project_name)
    if not common.yes(args, f'Delete project "{args.project_name}"?'):
        print("Aborting project deletion.")
        return 0
    client.request("DELETE", f"/api/v1/projects/{project['id']}")
    print(f"Successfully deleted project {args.project_name}.")
    return 0


def _archive(args: Namespace, verb: str, said: str) -> int:
    client = common.connect(args)
    project = common.project_by_name(client, args.workspace_name, args.project_name)
    client.request("POST", f"/api/v1/projects/{project['id']}/{verb}")
    print(f"Successfully {said} project {args.project_name}.")
    return 0


def project_archive(args: Namespace) -> int:
    return _archive(args, "archive", "archived")


def project_unarchive(args: Namespace) -> int:
    return _archive(args, "unarchive", "un-archived")


_WS = ("workspace_name", {"help": "name of the workspace"})
_PROJECT = ("project_name", {"help": "name of the project"})

#: ``det project``'s verbs (det_sdk.cli.main assembles the nouns' tables)
COMMANDS: dict[str, Any] = {
    "list": (project_list, "list the projects of a workspace", [
        _WS, ("--sort-by", {"choices": ["id", "name"], "default": "id",
                            "help": "sort by the given field"}),
        ("--order-by", {"choices": ["asc", "desc"], "default": "asc",
                        "help": "ascending or descending order"})]),
    "create": (project_create, "create a project", [
        _WS, ("name", {"help": "name of the project"}),
        ("--description", {"help": "description of the project"})]),
    "describe": (project_describe, "describe a project and its experiments",
                 [_WS, _PROJECT]),
    "delete": (project_delete, "delete an empty project", [_WS, _PROJECT, common.YES]),
    "archive": (project_archive, "archive a project", [_WS, _PROJECT]),
    "unarchive": (project_unarchive, "unarchive a project", [_WS, _PROJECT]),
}
