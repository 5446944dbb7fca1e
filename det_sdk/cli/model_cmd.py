"""``det model create/list/describe/register-version/delete``: the master's model registry
(det_sdk.master.models), as Determined's ``det model`` commands. What the master holds
(names, descriptions, metadata) is printed with control characters escaped."""

from __future__ import annotations

from argparse import Namespace

from det_sdk.cli import common
from det_sdk.cli.render import escape, print_json, table
from det_sdk.errors import UsageError

# `det --help` builds this command table: typing (4 ms) only for the type checker
TYPE_CHECKING = False
if TYPE_CHECKING:
    from argparse import Namespace
    from collections.abc import Callable
    from typing import Any

__all__ = ["COMMANDS"]


def _quoted(name: str) -> str:
    """A model's name as one URL path segment: ``../jobs`` names a model (which the
    master refuses as a name), never another route."""
    from urllib.parse import quote

    if name in (".", ".."):
        raise UsageError(f"name: {name!r} is not a model's name")
    return quote(name, safe="")


def model_create(args: Namespace) -> int:
    import json

    try:
        metadata = json.loads(args.metadata) if args.metadata else {}
    except ValueError as err:
        raise UsageError(f"--metadata: not JSON ({err}); give a JSON object, e.g. "
                         """'{"team": "vision"}'""") from None
    if not isinstance(metadata, dict):
        raise UsageError(f"--metadata: expected a JSON object, got {type(metadata).__name__}")
    row = common.connect(args).request("POST", "/api/v1/models", json={
        "name": args.name, "description": args.description or "", "metadata": metadata})
    if args.json:
        print_json(row)
    else:
        print(escape(f"Created model {row['name']} (id {row['id']})"))
    return 0


def model_list(args: Namespace) -> int:
    rows = common.connect(args).request("GET", "/api/v1/models")["models"]
    if args.json:
        print_json(rows)
        return 0
    print(table(["ID", "NAME", "VERSIONS", "DESCRIPTION"],
                [[m["id"], m["name"], m["num_versions"], m["description"]] for m in rows]))
    return 0


def model_describe(args: Namespace) -> int:
    client = common.connect(args)
    model = client.request("GET", f"/api/v1/models/{_quoted(args.name)}")
    versions = client.request("GET", f"/api/v1/models/{_quoted(args.name)}/versions")["versions"]
    if args.json:
        print_json({**model, "versions": versions})
        return 0
    print(escape(f"model {model['name']} (id {model['id']}): {model['description']}"))
    if model["metadata"]:
        import json

        # json.dumps writes control characters as \u001b already; escape() for the rest
        print(escape(f"  metadata: {json.dumps(model['metadata'])}"))
    print(table(["VERSION", "CHECKPOINT"], [[v["version"], v["checkpoint_uuid"]]
                                            for v in versions]))
    return 0


def model_register_version(args: Namespace) -> int:
    row = common.connect(args).request("POST", f"/api/v1/models/{_quoted(args.name)}/versions",
                                json={"checkpoint_uuid": args.uuid})
    if args.json:
        print_json(row)
    else:
        print(escape(f"Registered checkpoint {args.uuid} as version {row['version']} of "
                     f"{row['model_name']}"))
    return 0


def model_delete(args: Namespace) -> int:
    row = common.connect(args).request("DELETE", f"/api/v1/models/{_quoted(args.name)}")
    if args.json:
        print_json(row)
    else:
        print(escape(f"Deleted model {row['name']} (id {row['id']}) and its "
                     f"{row['num_versions']} version(s); their checkpoints stay"))
    return 0


_NAME = ("name", {"help": "the model's name"})
#: ``det model``'s verbs (det_sdk.cli.main assembles the nouns' tables)
COMMANDS: dict[str, tuple[Callable[[Namespace], int], str, list[tuple[Any, ...]]]] = {
    "create": (model_create, "create a model in the registry",
               [_NAME, ("--description", {"default": "", "help": "what the model is"}),
                ("--metadata", {"help": "a JSON object kept with the model"})]),
    "list": (model_list, "the registry's models", []),
    "describe": (model_describe, "a model and its versions", [_NAME]),
    "register-version": (model_register_version, "register a checkpoint as the model's "
                         "next version", [_NAME, ("uuid",)]),
    "delete": (model_delete, "delete a model and its versions (the checkpoints stay)",
               [_NAME]),
}
