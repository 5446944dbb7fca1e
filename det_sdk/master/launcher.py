"""Starting, watching and stopping the processes of trials and jobs.

Each task runs as ``sh -c '<entrypoint>; echo $? > exit_code'`` in a new process
session under its working directory, with the environment protocol of
``det_sdk.info``; with more than one slot, under ``horovodrun -np N --gloo``. The
exit code goes to a file so that a master restarted while the task runs can still
learn how it ended (the task is not its child any more).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import signal
import subprocess
import sys
import threading
import time
import uuid as uuidlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from det_sdk.api import AllocationState
from det_sdk.master.archive import unpack
from det_sdk.master.store import Store
from det_sdk.storage import pid_alive

__all__ = ["Launcher"]

KILL_GRACE_SECONDS = 10.0


def _alive(pid: int) -> bool:
    if not pid_alive(pid):
        return False
    # A zombie child still answers kill(0): reap it if it is ours.
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True


def _wait_group_gone(pgid: int, timeout: float) -> bool:
    """Wait until no process of group ``pgid`` is left (a task ends with its last one).

    Returns False if some are still there after ``timeout`` seconds.
    """
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return True
        time.sleep(0.1)
    return False


def _exit_file(workdir: str | Path, alloc_id: str) -> Path:
    """Where a task's shell writes the entrypoint's exit status (beside its workdir)."""
    return Path(workdir).parent / f"{alloc_id}.exit_code"


def _recorded_exit(alloc: dict[str, Any]) -> int | None:
    """The exit status the task's shell recorded, or None if it recorded none."""
    if not alloc["workdir"]:
        return None
    try:
        return int(_exit_file(alloc["workdir"], alloc["id"]).read_text().strip())
    except (OSError, ValueError):
        return None


class Launcher:
    """Runs tasks within a number of slots; calls ``on_exit(allocation, code)`` at the end."""

    def __init__(self, store: Store, data_dir: Path, slots: int, master_url: str,
                 on_exit: Callable[[dict[str, Any], int], None]) -> None:
        self.store = store
        self.data_dir = data_dir
        self.slots = slots
        self.master_url = master_url
        self.on_exit = on_exit
        # the master runs with umask 077 (its data are private); tasks get the user's own
        self.task_umask = 0o022
        self._lock = threading.Lock()

    # --- slots ----------------------------------------------------------------------------

    def free_slots(self) -> int:
        used = sum(a["slots"] for a in self.store.running_allocations())
        return self.slots - used

    # --- launching --------------------------------------------------------------------------

    def launch(
        self,
        *,
        task_type: str,
        task_id: int,
        archive: str,
        workdir: Path,
        entrypoint: str,
        slots: int,
        env: dict[str, str],
        log_path: Path,
    ) -> str:
        """Start a task; returns its allocation id.

        Raises whatever stops the start (an archive that does not unpack, an
        environment over the kernel's limit, a NUL in the entrypoint): the scheduler
        ends the task with that reason.
        """
        alloc_id = f"{task_type.lower()}-{task_id}-{uuidlib.uuid4().hex[:8]}"
        token = secrets.token_urlsafe(24)
        if not workdir.exists():
            unpack(Path(archive).read_bytes(), workdir)
        exit_file = _exit_file(workdir, alloc_id)
        command = entrypoint
        if slots > 1:
            horovodrun = Path(sys.executable).with_name("horovodrun")
            command = (f"{shlex.quote(str(horovodrun))} -np {slots} --gloo "
                       f"sh -c {shlex.quote(entrypoint)}")
        # The shell outlives a SIGTERM to the group (a trap, not an ignore: the
        # entrypoint gets the default disposition back) so that it records the
        # entrypoint's own exit status once the entrypoint has finished.
        wrapped = f"trap 'true' TERM INT; {command}; echo $? > {shlex.quote(str(exit_file))}"
        full_env = {
            **os.environ,
            # `python3` in an entrypoint is the interpreter that runs det_sdk
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONUNBUFFERED": "1",
            **env,
            "DET_MASTER": self.master_url,
            "DET_SESSION_TOKEN": token,
            "DET_ALLOCATION_ID": alloc_id,
            "DET_TASK_TYPE": task_type,
        }
        # DET_USER_TOKEN: a task gets its own token, never the user's (set when the
        # master was started from a shell that had it)
        for var in ("DET_RESUME", "DET_CONFIG", "DET_RUNS_DIR", "DET_USER_TOKEN"):
            full_env.pop(var, None)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, open(log_path, "ab") as log:
            proc = subprocess.Popen(
                ["sh", "-c", wrapped], cwd=workdir, env=full_env, stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                umask=self.task_umask,
            )
            self.store.create_allocation({
                "id": alloc_id, "task_type": task_type,
                "trial_id": task_id if task_type == "TRIAL" else None,
                "job_id": task_id if task_type == "GENERIC" else None,
                "token": token, "state": AllocationState.RUNNING.value, "pid": proc.pid,
                "slots": slots,
                "workdir": str(workdir), "started": time.time(),
            })
        threading.Thread(target=self._wait_child, args=(alloc_id, proc), daemon=True).start()
        return alloc_id

    def _wait_child(self, alloc_id: str, proc: subprocess.Popen[bytes]) -> None:
        code = proc.wait()
        _wait_group_gone(proc.pid, KILL_GRACE_SECONDS + 5)
        self._finish(alloc_id, code)

    def adopt(self, alloc: dict[str, Any]) -> None:
        """Watch a task started by an earlier master process (after a restart)."""
        threading.Thread(target=self._watch_pid, args=(alloc,), daemon=True).start()

    def _watch_pid(self, alloc: dict[str, Any]) -> None:
        while alloc["pid"] and _alive(alloc["pid"]):
            time.sleep(0.5)
        _wait_group_gone(alloc["pid"], KILL_GRACE_SECONDS + 5)
        code = _recorded_exit(alloc)
        # without a recorded code it died before its shell could write one
        self._finish(alloc["id"], -signal.SIGKILL if code is None else code)

    def _finish(self, alloc_id: str, code: int) -> None:
        alloc = self.store.allocation(alloc_id)
        # an allocation's one transition: RUNNING -> EXITED, once (its token ends with it)
        if alloc is None or alloc["state"] != AllocationState.RUNNING.value:
            return
        recorded = _recorded_exit(alloc) if code == 0 else None
        if recorded is not None:
            code = recorded  # the shell's report is the entrypoint's own status
        self.store.update_allocation(alloc_id, state=AllocationState.EXITED.value,
                                     exit_code=code, ended=time.time())
        self.on_exit({**alloc, "exit_code": code}, code)

    # --- stopping ---------------------------------------------------------------------------

    def kill(self, alloc: dict[str, Any], grace: float = KILL_GRACE_SECONDS) -> None:
        """SIGTERM the task's process group, SIGKILL it after ``grace`` seconds."""
        pid = alloc["pid"]
        if not pid:
            return
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            return

        def finish_off() -> None:
            if not _wait_group_gone(pid, grace):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)

        threading.Thread(target=finish_off, daemon=True).start()


def task_env(info: dict[str, Any]) -> dict[str, str]:
    """The ``DET_*`` variables of a trial or job, as strings."""
    out = {}
    for key, value in info.items():
        if value is None:
            continue
        out[key] = value if isinstance(value, str) else json.dumps(value)
    return out
