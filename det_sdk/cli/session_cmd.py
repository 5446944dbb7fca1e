"""Determined's ``det user login/logout/whoami``, ``det task list/logs``, ``det master
info/logs`` and ``det version`` over det_sdk's single user.

det_sdk's master has one user, whoever holds its token (``det master up`` saves it in
``~/.det/credentials.json``; elsewhere ``DET_USER_TOKEN``). ``det user login`` checks that
token against the master (asking for it on a terminal when none is saved), as Determined's
scripts call it first; ``logout`` forgets the saved one.

>>> USER_NAME
'determined'
"""

from __future__ import annotations

import sys
from argparse import Namespace

from det_sdk.cli.render import print_json, print_rows
from det_sdk.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["TASK_COMMANDS", "USER_COMMANDS", "USER_NAME"]

#: the name det_sdk's single user answers to (Determined's default non-admin user)
USER_NAME = "determined"


def _checked(url: str, token: str) -> None:
    from det_sdk.client import MasterClient, MasterError

    client = MasterClient(url, token)
    try:
        client.request("GET", "/api/v1/master")
    except MasterError as err:
        if err.status in (401, 403):
            raise UsageError(f"the master at {url} refuses this token: it is not the token of "
                             "its user (det master up saved the right one on the master's "
                             "machine, in ~/.det/credentials.json)") from None
        raise
    finally:
        client.close()


def user_login(args: Namespace) -> int:
    """``det user login [USERNAME]``: the master's token works (saved for later calls)."""
    from det_sdk.client import load_token, save_token

    token = load_token(args.master)
    if token is None:
        if not sys.stdin.isatty():
            raise UsageError(f"no token for {args.master}: det_sdk's master has one user, "
                             "whose token `det master up` saved on its machine; set "
                             "DET_USER_TOKEN, or run det user login on a terminal to paste it")
        import getpass

        token = getpass.getpass(f"Token of {args.master}'s user (det_sdk has no passwords): ")
    _checked(args.master, token)
    save_token(args.master, token)
    if args.username and args.username != USER_NAME:
        print(f"det_sdk has one user: logged in as that user ('{USER_NAME}'), not "
              f"'{args.username}'", file=sys.stderr)
    print(f"Authenticated as {USER_NAME}.")
    return 0


def user_logout(args: Namespace) -> int:
    """``det user logout``: forget the token saved for this master."""
    import json

    from det_sdk.atomic import write_atomic
    from det_sdk.client import credentials_path

    path = credentials_path()
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        saved = {}
    if saved.pop(args.master.rstrip("/"), None) is not None:
        write_atomic(path, json.dumps(saved, indent=1), mode=0o600)
    return 0


def user_whoami(args: Namespace) -> int:
    from det_sdk.client import load_token

    token = load_token(args.master)
    if token is None:
        raise UsageError(f"not logged in to {args.master}: det user login")
    _checked(args.master, token)
    print(f"You are logged in as user '{USER_NAME}'")
    return 0


def _client(args: Namespace) -> Any:
    from det_sdk.cli.tasks import _client as client

    return client(args)


def task_list(args: Namespace) -> int:
    """``det task list``: what runs now (one row per allocation: a trial's or a job's)."""
    tasks = _client(args).request("GET", "/api/v1/tasks")["tasks"]
    for t in tasks:
        t["task_id"] = f"trial-{t['trial_id']}" if t["trial_id"] is not None \
            else f"job-{t['job_id']}"
    if args.json:
        print_json(tasks)
        return 0
    rows = [[t["task_id"], t["type"], t["state"], t["slots"], t["id"]] for t in tasks]
    headers = ["Task ID", "Type", "State", "Slots", "Allocation"]
    print_rows(headers, rows, args.csv)
    return 0


def task_logs(args: Namespace) -> int:
    """``det task logs TASK_ID``: TASK_ID as ``det task list`` shows it (trial-N, job-N)."""
    from det_sdk.cli.logs_cmd import print_log

    kind, _, number = args.task_id.partition("-")
    if kind not in ("trial", "job") or not number.isdigit():
        raise UsageError(f"task id {args.task_id!r}: expected trial-N or job-N, as "
                         "`det task list` shows them")
    client = _client(args)
    task_id = int(number)
    state = client.trial if kind == "trial" else client.job
    print_log(client, kind + "s", task_id, lambda: state(task_id)["state"], args)
    return 0


def job_list(args: Namespace) -> int:
    """Determined's ``det job list``: the scheduler's queue, first submitted first."""
    import datetime

    jobs = _client(args).request("GET", "/api/v1/job-queue")["jobs"]
    jobs = jobs[args.offset:args.offset + args.limit] if args.pages == "1" \
        else jobs[args.offset:]
    if args.reverse:
        jobs = jobs[::-1]
    if args.json:
        print_json(jobs)
        return 0
    if args.yaml:
        import yaml

        sys.stdout.write(yaml.safe_dump(jobs, sort_keys=False))
        return 0
    headers = ["#", "ID", "Type", "Job Name", "Submitted", "Slots (acquired/needed)", "Status"]
    rows = [[n, j["id"], j["type"], j["name"] or "",
             datetime.datetime.fromtimestamp(j["submitted"]).strftime("%Y-%m-%d %H:%M:%S"),
             f"{j['acquired']}/{j['needed']}", j["state"]] for n, j in enumerate(jobs)]
    print_rows(headers, rows, args.csv)
    return 0


def master_info(args: Namespace) -> int:
    info = _client(args).request("GET", "/api/v1/master")
    if args.json:
        print_json(info)
    else:
        import yaml

        sys.stdout.write(yaml.safe_dump(info, sort_keys=False))
    return 0


def master_logs(args: Namespace) -> int:
    """``det master logs [-f] [--tail N]``: the master's own log."""
    import time

    from det_sdk.cli.logs_cmd import last_lines

    client = _client(args)

    def read(offset: int) -> tuple[str, int]:
        parts: list[str] = []
        while True:
            out = client.request("GET", "/api/v1/master/logs", params={"offset": offset})
            if not out["text"]:
                return "".join(parts), offset
            parts.append(out["text"])
            offset = out["offset"]

    text, offset = read(0)
    sys.stdout.write(text if args.tail is None else last_lines(text, args.tail))
    sys.stdout.flush()
    while args.follow:  # until interrupted, as Determined's (the master does not end)
        time.sleep(0.5)
        text, offset = read(offset)
        if text:
            sys.stdout.write(text)
            sys.stdout.flush()
    return 0


def version(args: Namespace) -> int:
    """``det version``: the client's version and the master's (when one answers)."""
    import yaml

    import det_sdk
    from det_sdk.client import MasterClient, load_token

    out: dict[str, Any] = {"client": {"version": det_sdk.__version__},
                           "master": {"address": args.master}}
    try:
        client = MasterClient(args.master, load_token(args.master))
        out["master"].update(client.request("GET", "/api/v1/master"))
    except Exception as err:
        out["master"]["error"] = str(err)
    sys.stdout.write(yaml.safe_dump(out, sort_keys=False))
    return 0


_CSV = ("--csv", {"action": "store_true", "help": "print as CSV"})

USER_COMMANDS: dict[str, Any] = {
    "login": (user_login, "check and save the master's user token",
              [("username", {"nargs": "?", "help": f"ignored name: det_sdk has one user "
                                                   f"('{USER_NAME}')"})]),
    "logout": (user_logout, "forget the token saved for this master", []),
    "whoami": (user_whoami, "the user the saved token is", []),
}


def _task_log_options() -> list[Any]:
    from det_sdk.cli.logs_cmd import LOG_OPTIONS

    return [("task_id", {"help": "trial-N or job-N (det task list)"}), *LOG_OPTIONS]


TASK_COMMANDS: dict[str, Any] = {
    "list": (task_list, "what runs now (trials and jobs)", [_CSV]),
    "logs": (task_logs, "a task's log", _task_log_options()),
}
