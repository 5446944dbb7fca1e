"""``det master up|down|status``: the embedded master as a background process.

Imported when one of these commands runs (``det_sdk.cli.main`` defines their arguments),
and light even then: ``det master status`` needs no crypto, no subprocess and no FastAPI.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from argparse import Namespace
from pathlib import Path

from det_sdk.cli import common
from det_sdk.cli.render import print_json
from det_sdk.env import setting

__all__ = ["data_dir_of", "default_data_dir", "master_down", "master_status", "master_up"]


def default_data_dir() -> Path:
    return Path(setting("DET_MASTER_DIR") or Path.home() / ".det" / "master")


def _private_file(path: Path, append: bool = False) -> int:
    """An open descriptor of ``path`` for writing, owner-only (0600) from its creation on:
    the log is the master's, like everything in its data directory (the pid file, written
    whole, goes through :func:`det_sdk.atomic.write_atomic` with the same mode)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), 0o600)
    os.fchmod(fd, 0o600)  # a file an earlier version made 0644
    return fd


def _index_path() -> Path:
    """``url -> data directory`` of the masters ``det master up`` started, beside the saved
    tokens: how ``status`` and ``down`` find a master's directory from ``DET_MASTER``."""
    creds = setting("DET_CREDENTIALS")
    return (Path(creds).parent if creds else Path.home() / ".det") / "masters.json"


def _index() -> dict[str, str]:
    with contextlib.suppress(OSError, ValueError):
        known = json.loads(_index_path().read_text())
        if isinstance(known, dict):
            return {str(k): str(v) for k, v in known.items()}
    return {}


def _remember(url: str, data_dir: Path) -> None:
    from det_sdk.atomic import write_atomic

    path = _index_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(path, json.dumps({**_index(), url: str(data_dir)}, indent=1) + "\n",
                 mode=0o600)


def data_dir_of(args: Namespace) -> Path:
    """The master's data directory: ``--data-dir``; else the one ``det master up`` started
    the master at ``-m`` / ``DET_MASTER`` with; else the default (``DET_MASTER_DIR``)."""
    if args.data_dir:
        return Path(args.data_dir)
    known = _index().get(getattr(args, "master", ""))
    return Path(known) if known else default_data_dir()


def _pid(data_dir: Path) -> int | None:
    from det_sdk.storage import pid_alive

    try:
        pid = int((data_dir / "master.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if pid_alive(pid) else None


def _healthy(url: str, timeout: float = 1.0) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def master_up(args: Namespace) -> int:
    import subprocess

    from det_sdk._extras import require_master
    from det_sdk.atomic import write_atomic
    from det_sdk.client import save_token

    # before anything starts: the master's packages are an extra (det_sdk[master])
    require_master("det master up")

    data_dir = Path(args.data_dir or default_data_dir()).resolve()
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    data_dir.chmod(0o700)  # the master's alone (tokens, logs): README, trust model
    url = f"http://{args.host}:{args.port}"
    pid = _pid(data_dir)
    if pid is not None:
        print(f"det: a master already runs from {data_dir} (pid {pid})", file=sys.stderr)
        return 1
    if _healthy(url):
        print(f"det: something already answers at {url}; pick another --port", file=sys.stderr)
        return 1
    kind = getattr(args, "resource_manager", "local")
    slurm_only = [f"--{n.replace('_', '-')}" for n in ("partition", "account", "slurm_option")
                  if getattr(args, n, None)]
    if slurm_only and kind != "slurm":
        verb = "is" if len(slurm_only) == 1 else "are"
        print(f"det: {', '.join(slurm_only)} {verb} only for --resource-manager slurm",
              file=sys.stderr)
        return 2
    log = os.fdopen(_private_file(data_dir / "master.log", append=True), "ab")
    command = [sys.executable, "-m", "det_sdk.master", "--data-dir", str(data_dir), "--host",
               args.host, "--port", str(args.port), "--slots", str(args.slots),
               "--resource-manager", kind]
    if getattr(args, "shared_dir", None):
        command += ["--shared-dir", str(Path(args.shared_dir).resolve())]
    for name in ("partition", "account"):
        if getattr(args, name, None):
            command += [f"--{name}", getattr(args, name)]
    command += [f"--slurm-option={o}" for o in getattr(args, "slurm_option", None) or []]
    command += ["--scheduler", getattr(args, "scheduler", None) or "priority"]
    if getattr(args, "token_lifetime", None):
        command += ["--token-lifetime", args.token_lifetime]
    proc = subprocess.Popen(
        command,
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )
    log.close()  # the child has its own copy
    write_atomic(data_dir / "master.pid", f"{proc.pid}\n", mode=0o600)  # read by _pid
    deadline = time.time() + 60
    while not _healthy(url):
        if proc.poll() is not None or time.time() > deadline:
            tail = (data_dir / "master.log").read_text(errors="replace").splitlines()[-15:]
            print("det: the master did not start:\n" + "\n".join(tail), file=sys.stderr)
            if proc.poll() is None:
                proc.kill()
            (data_dir / "master.pid").unlink(missing_ok=True)
            return 1
        time.sleep(0.2)
    save_token(url, (data_dir / "user.token").read_text().strip())
    _remember(url, data_dir)
    capacity = f"{args.slots} slots"
    with contextlib.suppress(OSError, ValueError, KeyError):
        capacity = json.loads((data_dir / "master.json").read_text())["capacity"]
    print(f"master listening on {url} (pid {proc.pid}, {capacity})")
    print(f"  data and logs: {data_dir}")
    print(f"  use it: export DET_MASTER={url}")
    return 0


def master_down(args: Namespace) -> int:
    import signal

    from det_sdk.storage import pid_alive

    data_dir = data_dir_of(args)
    pid = _pid(data_dir)
    if pid is None:
        print(f"det: no master runs from {data_dir}", file=sys.stderr)
        return 1
    os.kill(pid, signal.SIGTERM)
    deadline = time.time() + 20
    while time.time() < deadline:
        if not pid_alive(pid):
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
    (data_dir / "master.pid").unlink(missing_ok=True)
    # the master stops the tasks it was stopping (kills within their grace) before it exits
    print(f"master (pid {pid}) stopped; tasks it was stopping are stopped, the others keep "
          "running until it is back")
    print("its commands (det cmd) were killed: a command does not outlive its master")
    return 0


def master_status(args: Namespace) -> int:
    data_dir = data_dir_of(args)
    pid = _pid(data_dir)
    info = {}
    with contextlib.suppress(OSError, json.JSONDecodeError):
        info = json.loads((data_dir / "master.json").read_text())
    url = info.get("url", args.master)
    up = _healthy(url)
    status = {"running": up, "pid": pid, "url": url, "data_dir": str(data_dir),
              "slots": info.get("slots")}
    if args.json:
        print(json.dumps(status))
    else:
        state = "up" if up else "down"
        print(f"master {state} at {url} (pid {pid or '-'}, data {data_dir})")
    return 0 if up else 3


# --- Determined's `det master info` and `det master logs` --------------------------------------


def master_info(args: Namespace) -> int:
    info = common.connect(args).request("GET", "/api/v1/master")
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

    client = common.connect(args)

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
