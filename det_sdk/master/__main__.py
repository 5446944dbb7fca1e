"""``python -m det_sdk.master``: serve a master in the foreground (``det master up`` runs this)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from det_sdk.atomic import write_atomic
from det_sdk.master.queue import POLICIES
from det_sdk.master.resources import KINDS

if TYPE_CHECKING:
    from det_sdk.master.core import Master

TOKEN_FILE = "user.token"
INFO_FILE = "master.json"


def _user_token(master: Master, data_dir: Path) -> None:
    """Create the user token once; owner-only, for ``det master up`` to hand to the CLI."""
    path = data_dir / TOKEN_FILE
    if path.exists():
        master.store.add_user_token(path.read_text().strip())
        return
    # a new token replaces the old: the file was deleted to end it (docs/security.md)
    master.store.end_master_tokens()
    token = master.user_token()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")


def _lifetime(text: str) -> float:
    """``--token-lifetime``'s value in seconds (argparse's usage error otherwise)."""
    from det_sdk.durations import parse_duration
    from det_sdk.errors import UsageError

    try:
        return parse_duration(text, "--token-lifetime")
    except UsageError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m det_sdk.master")
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--slots", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--resource-manager", choices=KINDS, default="local")
    parser.add_argument("--shared-dir", type=Path)
    parser.add_argument("--partition")
    parser.add_argument("--account")
    parser.add_argument("--slurm-option", action="append", default=[])
    parser.add_argument("--scheduler", choices=POLICIES, default="priority")
    # how long a user token signs in (Determined's session: 7 days); "168h", "7d", "90s"
    parser.add_argument("--token-lifetime", type=_lifetime, default=None)
    args = parser.parse_args(argv)

    from det_sdk._extras import require_master
    from det_sdk.errors import MissingExtraError

    try:  # FastAPI and uvicorn are the det_sdk[master] extra
        require_master("python -m det_sdk.master")
    except MissingExtraError as err:
        print(f"python -m det_sdk.master: error: {err}", file=sys.stderr)
        return 1

    import logging

    import uvicorn

    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from det_sdk.master.app import create_app
    from det_sdk.master.core import Master

    url = f"http://{args.host}:{args.port}"
    # Everything the master writes is its owner's only (the database holds tokens);
    # the tasks it launches get the umask it was started with.
    task_umask = os.umask(0o077)
    options = {}
    if args.resource_manager == "slurm":
        options = {"partition": args.partition, "account": args.account,
                   "slurm_options": args.slurm_option}
    shared = args.shared_dir.resolve() if args.shared_dir else None
    try:
        master = Master(args.data_dir.resolve(), slots=args.slots, url=url,
                        resource_manager=args.resource_manager, shared_dir=shared, **options)
    except RuntimeError as err:  # e.g. no Slurm to be seen (SlurmError): say it plainly
        print(f"the master cannot start: {err}", flush=True)
        return 1
    master.launcher.task_umask = task_umask
    master.scheduler.policy = args.scheduler  # det_sdk.master.queue: priority or fair_share
    if args.token_lifetime is not None:  # before the app: its UI sessions last as long
        master.store.token_lifetime = args.token_lifetime
    _user_token(master, args.data_dir)
    master.start()
    slots = master.launcher.slots
    where = f"{slots}{master.launcher.capacity_note() or ' slots'}"
    info = {"url": url, "pid": os.getpid(), "slots": slots,
            "resource_manager": args.resource_manager, "capacity": where,
            "shared_dir": str(master.tasks_dir)}
    # `det master up|status` read it while it is written: whole or not at all, owner-only
    write_atomic(args.data_dir / INFO_FILE, json.dumps(info) + "\n", mode=0o600)
    print(f"master listening on {url} with {where}", flush=True)
    # uvicorn re-raises the SIGTERM of `det master down` once it has shut down: handled
    # here, it lets the master finish the stops it promised (master.stop) before it exits
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda signum, frame: None)
    # A trial's preemption long-poll may be in flight (up to its timeout, 20 s) when the
    # master goes; uvicorn would wait for it to end (measured: `det master down` 17 s
    # after any experiment ran). After 2 s it is cancelled: the trial asks the next master.
    uvicorn.run(create_app(master), host=args.host, port=args.port, log_level="warning",
                timeout_graceful_shutdown=2)
    master.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
