"""The local resource manager: tasks as process groups on the master's own machine.

Each task runs as ``sh -c '<entrypoint>; echo $? > exit_code'`` in a new process
session under its working directory, with the environment protocol of
``det_sdk.info``; with more than one slot, under ``horovodrun -np N --gloo``. Each
rank runs under :mod:`det_sdk.launch.catch`, which records its exception for the
trial's ``last_error``. The
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
import threading
import time
from pathlib import Path
from typing import Any

from det_sdk.api import AllocationState
from det_sdk.launch.horovodrun import command as horovodrun_command
from det_sdk.log_streams import streams_path
from det_sdk.master.agent_users import AgentUsers, prepare_task_dirs
from det_sdk.master.resources import (
    KILL_GRACE_SECONDS,
    ResourceManager,
    exit_file,
    process_env,
    recorded_exit,
)
from det_sdk.master.root_cause import catch_command, record_dir
from det_sdk.master.rows import AllocationRow
from det_sdk.master.startup_hook import hook_prefix, task_shell
from det_sdk.storage import pid_alive

__all__ = ["LocalManager"]


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


def _is_task(pid: int, alloc_id: str) -> bool:
    """Whether process ``pid`` is still the task's leader, not a later process that got its
    pid: its environment (fixed at exec) names the allocation. True where that cannot be
    read (not Linux): a group whose leader is gone keeps its id from reuse, so the doubt
    is only about a leader that is there."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except FileNotFoundError:
        return True  # no leader: what is left of the group is the task's
    except OSError:
        return True
    return f"DET_ALLOCATION_ID={alloc_id}".encode() in environ.split(b"\0")


class LocalManager(ResourceManager):
    """Runs tasks as process groups on this machine, within ``slots``."""

    kind = "local"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        self._agents: AgentUsers | None = None

    def _agent_users(self) -> AgentUsers:
        if self._agents is None:
            self._agents = AgentUsers(self.store)
        return self._agents

    # --- launching --------------------------------------------------------------------------

    def launch(self, *, task_type: str, task_id: int, archive: str, workdir: Path,
               entrypoint: str, slots: int, env: dict[str, str], log_path: Path,
               per_node: bool = False) -> str:
        alloc_id, token = self._new_task(task_type, task_id, archive, workdir)
        exit_path = exit_file(workdir, alloc_id)
        # each rank under det_sdk.launch.catch: its own exception becomes the task's error
        # (horovodrun signals the process it started, not its group: the wrapper passes
        # SIGTERM on; a task of one slot is signalled as a group)
        per_slot = slots > 1 and not per_node
        # one process writes the log: it notes which stream each part came from
        # (horovodrun's ranks mark their lines "<stdout>"/"<stderr>" themselves)
        command = catch_command(entrypoint, record_dir(workdir, alloc_id),
                                forward_signals=per_slot,
                                stream_index=None if per_slot else streams_path(log_path))
        if per_slot:
            command = f"{shlex.join(horovodrun_command())} -np {slots} --gloo {command}"
        # The shell outlives a SIGTERM to the group (a trap, not an ignore: the
        # entrypoint gets the default disposition back) so that it records the
        # entrypoint's own exit status once the entrypoint has finished.
        # Determined's startup-hook.sh, if the directory has one, sourced first
        hook = hook_prefix(workdir)
        wrapped = f"trap 'true' TERM INT; {hook}{command}; echo $? > " \
                  f"{shlex.quote(str(exit_path))}"
        # one node: every slot is this container's, the chief is this host
        node = {"DET_SLOT_IDS": json.dumps(list(range(slots))),
                "DET_CONTAINER_ADDRS": json.dumps(["127.0.0.1"]), "DET_CONTAINER_RANK": "0",
                "DET_CLUSTER_ID": self.cluster_id,
                # what a task's workers show each other's collectives (not its session token)
                "DET_COLLECTIVE_TOKEN": secrets.token_hex(16),
                # ports a task's processes add to their defaults (Determined's): tasks
                # running side by side on this host get different ones
                "DET_UNIQUE_PORT_OFFSET": str(int(alloc_id.rsplit("-", 1)[1], 16) % 1000)}
        full_env = process_env({**node, **env}, self.master_url, token, alloc_id, task_type)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        # a linked owner's task runs as their account (det_sdk.master.agent_users)
        account = self._agent_users().for_task(task_type, task_id)
        as_owner: dict[str, Any] = {}
        if account is not None:
            prepare_task_dirs(workdir.parent, *account, env)
            as_owner = {"user": account[0], "group": account[1], "extra_groups": []}
        with self._lock, open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [task_shell(workdir), "-c", wrapped], cwd=workdir, env=full_env, stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                umask=self.task_umask, **as_owner,
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

    # --- a task of an earlier master --------------------------------------------------------

    def _watch(self, alloc: AllocationRow) -> None:
        threading.Thread(target=self._watch_pid, args=(alloc,), daemon=True).start()

    def _watch_pid(self, alloc: AllocationRow) -> None:
        while alloc["pid"] and _alive(alloc["pid"]) and _is_task(alloc["pid"], alloc["id"]):
            time.sleep(0.5)
        if alloc["pid"]:
            _wait_group_gone(alloc["pid"], KILL_GRACE_SECONDS + 5)
        code = recorded_exit(alloc)
        # without a recorded code it died before its shell could write one
        self._finish(alloc["id"], -signal.SIGKILL if code is None else code)

    # --- stopping ---------------------------------------------------------------------------

    def _terminate(self, alloc: AllocationRow | dict[str, Any]) -> None:
        """SIGTERM the task's process group."""
        pid = alloc["pid"]
        if pid and _is_task(pid, alloc["id"]):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGTERM)
        if pid:  # and what left the group (setsid): the task's all the same (issue 58)
            from det_sdk.master.resources.strays import signal_strays

            signal_strays(alloc["id"], pid, signal.SIGTERM)

    def _force(self, alloc: AllocationRow) -> None:
        """SIGKILL what is left of the task's process group."""
        pid = alloc["pid"]
        if pid and _is_task(pid, alloc["id"]):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        if pid:  # and what left the group and outlived its SIGTERM
            from det_sdk.master.resources.strays import signal_strays

            signal_strays(alloc["id"], pid, signal.SIGKILL)
