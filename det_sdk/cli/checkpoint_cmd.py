"""``det checkpoint``: list, describe, download and delete checkpoints
(Determined's harness/determined/cli/checkpoint.py of 0.38.1)."""

from __future__ import annotations

from argparse import Namespace

from det_sdk.cli import common
from det_sdk.cli.common import (
    ALL,
    LIMIT,
    QUIET,
    YES,
    download_checkpoint,
    newest,
    num,
    refused,
    yes,
)
from det_sdk.cli.render import page_footer, print_json, table

TYPE_CHECKING = False  # typing costs `det --help` 4 ms: for the type checker only
if TYPE_CHECKING:

    from det_sdk.cli.common import CommandTable

__all__ = ["COMMANDS"]


def checkpoint_list(args: Namespace) -> int:
    rows, total = newest(common.connect(args), "/api/v1/checkpoints", "checkpoints", args,
                          trial_id=args.trial)
    if args.json:
        print_json(rows)
        return 0
    print(table(["UUID", "TRIAL", "BATCHES", "EPOCH", "SIZE", "OWNER", "METRICS"],
                [[c["uuid"] + (" (damaged)" if c.get("damaged") else ""), c["trial_id"],
                  c["steps_completed"], c["epoch"], c["size"], c.get("username", ""),
                  " ".join(f"{k}={num(v)}" for k, v in c["metrics"].items())] for c in rows]))
    footer = page_footer(len(rows), total, "checkpoints")
    if footer:
        print(footer)
    return 0


def checkpoint_describe(args: Namespace) -> int:
    c = common.connect(args).checkpoint(args.uuid)
    if args.json:
        print_json(c)
        return 0
    for key in ("uuid", "trial_id", "steps_completed", "epoch", "size", "path"):
        print(f"{key}: {c.get(key)}")
    if c.get("keras_backend"):
        print(f"keras_backend: {c['keras_backend']}")
    if c.get("username"):
        print(f"owner: {c['username']}")
    print("metrics: " + " ".join(f"{k}={v}" for k, v in (c.get("metrics") or {}).items()))
    return 0


def checkpoint_download(args: Namespace) -> int:
    download_checkpoint(common.connect(args), args.uuid, args.output_dir, args.quiet)
    return 0


def checkpoint_delete(args: Namespace) -> int:
    if not yes(args, "Deleting checkpoints will result in deletion of all data associated "
                      "with each checkpoint in the checkpoint storage. Do you still want to "
                      "proceed?"):
        print("Stopping deletion of checkpoints.")
        return 0
    uuids = [u for u in args.checkpoints_uuids.split(",") if u]
    common.connect(args).request("DELETE", "/api/v1/checkpoints", json={"uuids": uuids})
    print(f"Deleted checkpoints {args.checkpoints_uuids}")
    return 0


#: ``det checkpoint``'s verbs (det_sdk.cli.main assembles the nouns' tables)
COMMANDS: CommandTable = {
    "list": (checkpoint_list, "det_sdk's: the newest checkpoints (--trial: of one)",
             [("--trial",), LIMIT, ALL]),
    "describe": (checkpoint_describe, "a checkpoint's trial, step, size, metrics",
                 [("uuid",)]),
    "download": (checkpoint_download, "copy a checkpoint (default: checkpoints/UUID)",
                 [("uuid",), (("-o", "--output-dir"), {"help": "default: checkpoints/UUID"}),
                  QUIET,
                  ("--mode", refused("det_sdk downloads through the master only", True))]),
    "delete": (checkpoint_delete, "delete checkpoints: UUIDS (a,b,c)",
               [("checkpoints_uuids", {"help": "comma-separated UUIDs"}), YES]),
}
