"""``det workspace ...``: Determined 0.38's workspace commands over the master's
workspaces (issue 59): ``list``, ``list-projects``, ``create``, ``describe``,
``delete``, ``archive``, ``unarchive``. Determined's columns without the ones det_sdk
has no use for (agent user and group, pools: one master, one pool).

>>> sorted(COMMANDS)
['archive', 'create', 'delete', 'describe', 'list', 'list-projects', 'unarchive']
"""

from __future__ import annotations

from argparse import Namespace

from det_sdk.cli import common

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["COMMANDS", "PROJECT_HEADERS", "WORKSPACE_HEADERS"]

WORKSPACE_HEADERS = ["ID", "Name", "# Projects", "# Experiments", "Archived"]
PROJECT_HEADERS = ["ID", "Name", "Description", "# Experiments", "# Active Experiments"]


def _workspace_rows(workspaces: list[dict[str, Any]]) -> list[list[Any]]:
    return [[w["id"], w["name"], w["numProjects"], w["numExperiments"], w["archived"]]
            for w in workspaces]


def workspace_list(args: Namespace) -> int:
    """``det workspace list [--sort-by id|name] [--order-by asc|desc]``."""
    from det_sdk.cli.render import print_json, print_rows

    rows = common.connect(args).request("GET", "/api/v1/workspaces")["workspaces"]
    rows.sort(key=lambda w: w[args.sort_by], reverse=args.order_by == "desc")
    if args.json:
        print_json(rows)
    else:
        print_rows(WORKSPACE_HEADERS, _workspace_rows(rows), False)
    return 0


def workspace_list_projects(args: Namespace) -> int:
    """``det workspace list-projects NAME``: its projects (``det project list``)."""
    from det_sdk.cli.render import print_json, print_rows

    client = common.connect(args)
    ws = common.workspace_by_name(client, args.workspace_name)
    rows = client.request("GET", f"/api/v1/workspaces/{ws['id']}/projects")["projects"]
    rows.sort(key=lambda p: p[args.sort_by], reverse=args.order_by == "desc")
    if args.json:
        print_json(rows)
        return 0
    print_rows(PROJECT_HEADERS, [[p["id"], p["name"], p["description"], p["numExperiments"],
                                  p["numActiveExperiments"]] for p in rows], False)
    return 0


def workspace_create(args: Namespace) -> int:
    from det_sdk.cli.render import print_json, print_rows

    made = common.connect(args).request("POST", "/api/v1/workspaces",
                                        json={"name": args.name})["workspace"]
    if args.json:
        print_json(made)
    else:
        print_rows(WORKSPACE_HEADERS, _workspace_rows([made]), False)
    return 0


def workspace_describe(args: Namespace) -> int:
    from det_sdk.cli.render import print_json, print_rows

    ws = common.workspace_by_name(common.connect(args), args.workspace_name)
    if args.json:
        print_json(ws)
    else:
        print_rows(WORKSPACE_HEADERS, _workspace_rows([ws]), False)
    return 0


def workspace_delete(args: Namespace) -> int:
    """Refused by the master while any of its projects holds an experiment (move or
    delete them first): det_sdk deletes no experiment as a side effect."""
    client = common.connect(args)
    ws = common.workspace_by_name(client, args.workspace_name)
    if not common.yes(args, f'Delete workspace "{args.workspace_name}" and its (empty) '
                            "projects?"):
        print("Aborting workspace deletion.")
        return 0
    client.request("DELETE", f"/api/v1/workspaces/{ws['id']}")
    print(f"Successfully deleted workspace {args.workspace_name}.")
    return 0


def _archive(args: Namespace, verb: str, said: str) -> int:
    client = common.connect(args)
    ws = common.workspace_by_name(client, args.workspace_name)
    client.request("POST", f"/api/v1/workspaces/{ws['id']}/{verb}")
    print(f"Successfully {said} workspace {args.workspace_name}.")
    return 0


def workspace_archive(args: Namespace) -> int:
    return _archive(args, "archive", "archived")


def workspace_unarchive(args: Namespace) -> int:
    return _archive(args, "unarchive", "un-archived")


_NAME = ("workspace_name", {"help": "name of the workspace"})
_SORT = [("--sort-by", {"choices": ["id", "name"], "default": "id",
                        "help": "sort by the given field"}),
         ("--order-by", {"choices": ["asc", "desc"], "default": "asc",
                         "help": "ascending or descending order"})]

#: ``det workspace``'s verbs (det_sdk.cli.main assembles the nouns' tables)
COMMANDS: dict[str, Any] = {
    "list": (workspace_list, "list all workspaces", _SORT),
    "list-projects": (workspace_list_projects, "list the projects of a workspace",
                      [_NAME, *_SORT]),
    "create": (workspace_create, "create a workspace",
               [("name", {"help": "name of the workspace"})]),
    "describe": (workspace_describe, "describe a workspace", [_NAME]),
    "delete": (workspace_delete, "delete an empty workspace (and its empty projects)",
               [_NAME, common.YES]),
    "archive": (workspace_archive, "archive a workspace", [_NAME]),
    "unarchive": (workspace_unarchive, "unarchive a workspace", [_NAME]),
}
