"""``det task list/logs``: what runs now on the master (a trial's or a job's allocation)."""

from __future__ import annotations

from argparse import Namespace

from det_sdk.cli import common
from det_sdk.cli.common import CSV
from det_sdk.cli.logs_cmd import LOG_OPTIONS, print_log
from det_sdk.cli.render import print_json, print_rows
from det_sdk.errors import UsageError

TYPE_CHECKING = False  # typing costs `det --help` 4 ms: for the type checker only
if TYPE_CHECKING:
    from typing import Any

__all__ = ["COMMANDS"]


def task_list(args: Namespace) -> int:
    """``det task list``: what runs now (one row per allocation: a trial's or a job's)."""
    tasks = common.connect(args).request("GET", "/api/v1/tasks")["tasks"]
    for t in tasks:
        t["task_id"] = f"trial-{t['trial_id']}" if t["trial_id"] is not None \
            else f"job-{t['job_id']}"
        if t["type"] == "COMMAND":  # its allocation is command-<id>-<hex> (issue 58)
            t["task_id"] = "-".join(t["id"].split("-")[:2])
    if args.json:
        print_json(tasks)
        return 0
    rows = [[t["task_id"], t["type"], t["state"], t["slots"], t["id"]] for t in tasks]
    headers = ["Task ID", "Type", "State", "Slots", "Allocation"]
    print_rows(headers, rows, args.csv)
    return 0


def task_logs(args: Namespace) -> int:
    """``det task logs TASK_ID``: TASK_ID as ``det task list`` shows it (trial-N, job-N)."""
    kind, _, number = args.task_id.partition("-")
    if kind not in ("trial", "job", "command") or not number.isdigit():
        raise UsageError(f"task id {args.task_id!r}: expected trial-N, job-N or command-N, "
                         "as `det task list` shows them")
    client = common.connect(args)
    task_id = int(number)
    if kind == "command":  # Determined's `det task logs` of a command (issue 58)
        def command_state() -> str:
            cmd = client.request("GET", f"/api/v1/commands/{task_id}")["command"]
            return "COMPLETED" if cmd["state"] == "TERMINATED" else cmd["state"]

        print_log(client, "commands", task_id, command_state, args)
        return 0
    state = client.trial if kind == "trial" else client.job
    print_log(client, kind + "s", task_id, lambda: state(task_id)["state"], args)
    return 0


#: ``det task``'s verbs (det_sdk.cli.main assembles the nouns' tables)
COMMANDS: dict[str, Any] = {
    "list": (task_list, "what runs now (trials and jobs)", [CSV]),
    "logs": (task_logs, "a task's log", [
        ("task_id", {"help": "trial-N, job-N or command-N (det task list)"}), *LOG_OPTIONS]),
}
