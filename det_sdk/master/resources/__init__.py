"""Where the master's tasks run: the resource-manager seam.

One interface, chosen once when the master starts (``det master up --resource-manager``):

- ``local`` (:class:`~det_sdk.master.resources.local.LocalManager`, the default): each
  task is a process group on this machine, under ``horovodrun -np N --gloo`` when it
  has more than one slot;
- ``slurm`` (:class:`~det_sdk.master.resources.slurm.SlurmManager`): each task is one
  Slurm job of N tasks, possibly across nodes, with Horovod's rendezvous inside the job.

The scheduler, the lifecycle and the searchers hold a :class:`ResourceManager` and
never ask which one: they ``launch`` a task, ``kill`` it, ``adopt`` it after a master
restart, read ``slots`` and ``free_slots()``, and hear of its end through
``on_exit(allocation, code)``.

What every implementation shares lives here:

- a task's exit status is written to a file beside its working directory by the task
  itself (its shell, or the Slurm batch step), so that a master restarted while it
  runs still learns how it ended;
- a kill is a polite stop now (SIGTERM) and a forced one ``grace`` seconds later. The
  deadline is recorded on the allocation (``kill_after``) before the polite stop is
  sent, and carried out by whichever master runs when it falls due: this one, the one
  that replaces it after a crash, or this one on its way down (:meth:`stop` waits for
  the stops it promised, within the grace, before the master exits).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import sys
import threading
import time
import uuid as uuidlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from det_sdk.env import outside
from det_sdk.errors import UsageError
from det_sdk.master.archive import unpack
from det_sdk.master.task_files import mark_unpacked

if TYPE_CHECKING:
    from det_sdk.master.rows import AllocationRow
    from det_sdk.master.store import Store

__all__ = ["KILL_GRACE_SECONDS", "KINDS", "ResourceManager", "make_resource_manager",
           "task_env"]

log = logging.getLogger("det_sdk.master.resources")

KILL_GRACE_SECONDS = 10.0
KINDS = ("local", "slurm")
# how long a forced stop that has not ended the task waits before it is tried again
_RETRY_SECONDS = 5.0
_RUNNING, _EXITED = "RUNNING", "EXITED"  # det_sdk.api.AllocationState (not imported: light)


def exit_file(workdir: str | Path, alloc_id: str) -> Path:
    """Where a task writes its entrypoint's exit status (beside its working directory)."""
    return Path(workdir).parent / f"{alloc_id}.exit_code"


def recorded_exit(alloc: AllocationRow | dict[str, Any]) -> int | None:
    """The exit status the task recorded, or None if it recorded none."""
    if not alloc["workdir"]:
        return None
    try:
        return int(exit_file(alloc["workdir"], alloc["id"]).read_text().strip())
    except (OSError, ValueError):
        return None


def task_env(info: dict[str, Any]) -> dict[str, str]:
    """The ``DET_*`` variables of a trial or job, as strings.

    >>> task_env({"DET_TRIAL_ID": "3", "DET_HPARAMS": {"lr": 0.1}, "DET_LATEST_CHECKPOINT": None})
    {'DET_TRIAL_ID': '3', 'DET_HPARAMS': '{"lr": 0.1}'}
    """
    out = {}
    for key, value in info.items():
        if value is None:
            continue
        out[key] = value if isinstance(value, str) else json.dumps(value)
    return out


def config_env(env: dict[str, str]) -> dict[str, str]:
    """The ``environment.environment_variables`` of the task's config (its
    ``DET_EXPERIMENT_CONFIG``, validated at create: names det_sdk owns were refused).

    >>> config_env({"DET_EXPERIMENT_CONFIG":
    ...             '{"environment": {"environment_variables": ["DATA=/d", "N=1"]}}'})
    {'DATA': '/d', 'N': '1'}
    """
    from det_sdk.config import environment_variables

    raw = env.get("DET_EXPERIMENT_CONFIG")
    config = json.loads(raw) if raw else None
    return environment_variables(config if isinstance(config, dict) else None)


def _determined_shim() -> str:
    """det_sdk's ``determined`` package directory, unless a real one is importable."""
    import importlib.util

    if importlib.util.find_spec("determined") is not None:
        return ""
    return str(Path(__file__).resolve().parents[2] / "_compat_path")


_DETERMINED_SHIM = _determined_shim()


def process_env(env: dict[str, str], master_url: str, token: str, alloc_id: str,
                task_type: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a task's processes: the master's own, with ``python3``
    resolving to det_sdk's interpreter, the config's ``environment_variables`` over it,
    and the task's ``DET_*`` protocol on top."""
    # nothing of the master's own shell that belongs to a run, a task or a rank (a
    # master started from a trial's shell, or with DET_RESUME set, passes none on)
    base = outside(os.environ if base is None else base)
    if _DETERMINED_SHIM:  # Determined's module names (determined.launch.wrap_rank, ...)
        path = base.get("PYTHONPATH")
        base["PYTHONPATH"] = os.pathsep.join([*([path] if path else []), _DETERMINED_SHIM])
    full = {
        **base,
        # `python3` in an entrypoint is the interpreter that runs det_sdk
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{base.get('PATH', '')}",
        "PYTHONUNBUFFERED": "1",
        # the config's environment.environment_variables, over the master's own
        **config_env(env),
        **env,
        "DET_MASTER": master_url,
        "DET_SESSION_TOKEN": token,
        "DET_ALLOCATION_ID": alloc_id,
        "DET_TASK_TYPE": task_type,
    }
    return full


class ResourceManager:
    """Runs tasks within ``slots``; calls ``on_exit(allocation, code)`` once at each end.

    Subclasses start, watch, signal and force-stop their tasks (``launch``, ``_watch``,
    ``_terminate``, ``_force``, and optionally ``_poll`` every ``poll_seconds``); the
    bookkeeping of allocations, exits and kill deadlines is here.
    """

    kind = "?"
    poll_seconds: float | None = None  # call _poll this often (None: never)
    #: what ``describe`` says of a trial while its launch runs: None, RUNNING (a local
    #: process starts at once); a manager with a queue says why it is not running yet
    launching_reason: str | None = None

    def __init__(self, store: Store, data_dir: Path, slots: int, master_url: str,
                 on_exit: Callable[[dict[str, Any], int], None]) -> None:
        self.store = store
        self.data_dir = data_dir
        self.slots = slots
        self.master_url = master_url
        self.on_exit = on_exit
        # ClusterInfo.cluster_id: the same for every task of this master's data
        self.cluster_id = str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, str(Path(data_dir).resolve())))
        # the master runs with umask 077 (its data are private); tasks get the user's own
        self.task_umask = 0o022
        self._deadlines: dict[str, float] = {}  # allocation id -> when to force it
        self._deadline_lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        #: the trial whose :meth:`launch` runs now (the scheduler launches one at a time;
        #: its state is RUNNING before the allocation that carries a queue reason exists)
        self.launching_trial: int | None = None

    # --- what the scheduler asks ------------------------------------------------------------

    def free_slots(self) -> int:
        """Slots the scheduler may still fill now."""
        used = sum(a["slots"] for a in self.store.running_allocations())
        return self.slots - used

    def capacity_note(self) -> str:
        """Words after the slot count in "more than this master has (N...)" errors."""
        return ""

    def launch(self, *, task_type: str, task_id: int, archive: str, workdir: Path,
               entrypoint: str, slots: int, env: dict[str, str], log_path: Path,
               per_node: bool = False) -> str:
        """Start a task; returns its allocation id.

        ``per_node``: run ``entrypoint`` once per node (Determined's launch model: it
        starts the node's ``slot_ids`` workers itself) instead of once per slot.

        Raises whatever stops the start (an archive that does not unpack, an environment
        over the kernel's limit, a refused submission): the scheduler ends the task with
        that reason.
        """
        raise NotImplementedError

    @staticmethod
    def _new_task(task_type: str, task_id: int, archive: str, workdir: Path) -> tuple[str, str]:
        """What every launch starts with: a new allocation id and task token, and the
        model's archive unpacked into ``workdir`` (kept from an earlier allocation)."""
        alloc_id = f"{task_type.lower()}-{task_id}-{uuidlib.uuid4().hex[:8]}"
        if not workdir.exists():
            unpack(Path(archive).read_bytes(), workdir)
            mark_unpacked(workdir)  # files changed after this are the task's (kept)
        return alloc_id, secrets.token_urlsafe(24)

    def adopt(self, alloc: AllocationRow) -> None:
        """Watch a task started by an earlier master process (after a restart), and carry
        out the forced stop that master recorded for it, if any."""
        kill_after = alloc.get("kill_after")
        if kill_after is not None:
            self._schedule_force(alloc["id"], float(kill_after))
        self._watch(alloc)

    def kill(self, alloc: AllocationRow | dict[str, Any],
             grace: float = KILL_GRACE_SECONDS) -> None:
        """Stop a task: politely now (SIGTERM), by force after ``grace`` seconds.

        The deadline is recorded first: a master that dies in between leaves it to the next.
        """
        deadline = time.time() + grace
        self.store.update_allocation(alloc["id"], kill_after=deadline)
        self._schedule_force(alloc["id"], deadline)
        self._terminate(alloc)

    # --- the master's own start and stop ----------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name=f"resources-{self.kind}")
        self._thread.start()

    def stop(self, timeout: float = KILL_GRACE_SECONDS + 5) -> None:
        """The master is going: carry out the forced stops already promised (a task asked
        to stop is not left running because the master went first), then return. Tasks
        nobody asked to stop keep running for the next master to adopt."""
        end = time.time() + timeout
        while time.time() < end:
            with self._deadline_lock:
                if not self._deadlines:
                    break
            time.sleep(0.05)
        self._closed.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

    # --- for subclasses ---------------------------------------------------------------------

    def _watch(self, alloc: AllocationRow) -> None:
        """Start watching a task of an earlier master for its end."""
        raise NotImplementedError

    def _terminate(self, alloc: AllocationRow | dict[str, Any]) -> None:
        """Ask the task to stop (SIGTERM to its processes)."""
        raise NotImplementedError

    def _force(self, alloc: AllocationRow) -> None:
        """Stop the task now, whatever it does (SIGKILL, cancel)."""
        raise NotImplementedError

    def _poll(self) -> None:
        """Called every ``poll_seconds`` from the manager's thread."""

    def _finish(self, alloc_id: str, code: int) -> None:
        """The task ended with ``code``: its allocation's one transition, RUNNING -> EXITED
        (its token ends with it), then ``on_exit``."""
        alloc = self.store.allocation(alloc_id)
        if alloc is None or alloc["state"] != _RUNNING:
            self._unschedule(alloc_id)
            return
        recorded = recorded_exit(alloc) if code == 0 else None
        if recorded is not None:
            code = recorded  # the task's own report is the entrypoint's status
        self.store.update_allocation(alloc_id, state=_EXITED, exit_code=code,
                                     ended=time.time())
        try:
            self.on_exit({**alloc, "state": _EXITED, "exit_code": code}, code)
        finally:
            # only now: a master on its way down (stop) waits for the whole of it
            self._unschedule(alloc_id)

    # --- forced stops -----------------------------------------------------------------------

    def _schedule_force(self, alloc_id: str, when: float) -> None:
        with self._deadline_lock:
            self._deadlines[alloc_id] = when
        self._wake.set()

    def _unschedule(self, alloc_id: str) -> None:
        with self._deadline_lock:
            self._deadlines.pop(alloc_id, None)

    def _force_due(self) -> None:
        now = time.time()
        with self._deadline_lock:
            due = [a for a, when in self._deadlines.items() if when <= now]
        for alloc_id in due:
            alloc = self.store.allocation(alloc_id)
            if alloc is None or alloc["state"] != _RUNNING:
                self._unschedule(alloc_id)
                continue
            log.info("allocation %s did not stop within its grace: forcing it", alloc_id)
            try:
                self._force(alloc)
            except Exception:  # tried again below; the thread must live on
                log.exception("forcing allocation %s failed", alloc_id)
            # until its end is seen: once more later if it is still there then
            self._schedule_force(alloc_id, now + _RETRY_SECONDS)

    def _loop(self) -> None:
        next_poll = 0.0
        while not self._closed.is_set():
            try:
                if self.poll_seconds is not None and time.time() >= next_poll:
                    self._poll()
                    next_poll = time.time() + self.poll_seconds
                self._force_due()
            except Exception:  # the loop must outlive one bad poll
                log.exception("%s resource manager: poll failed", self.kind)
            with self._deadline_lock:
                waits = [w - time.time() for w in self._deadlines.values()]
            if self.poll_seconds is not None:
                waits.append(next_poll - time.time())
            timeout = min([*waits, 1.0])
            self._wake.wait(max(timeout, 0.01))
            self._wake.clear()


def make_resource_manager(kind: str, store: Store, data_dir: Path, slots: int,
                          master_url: str, on_exit: Callable[[dict[str, Any], int], None],
                          **options: Any) -> ResourceManager:
    """The resource manager named ``kind`` (one of :data:`KINDS`).

    ``options`` are the kind's own: for ``slurm``, ``partition``, ``account``,
    ``slurm_options`` (extra ``sbatch`` arguments), ``wants_stop`` (allocation id ->
    whether it should stop: a job still waiting in Slurm's queue is then cancelled).
    """
    # The one import loop of this package, by design: the managers implement the
    # interface defined here and are imported here only when `det master up` picks one
    if kind == "local":
        from det_sdk.master.resources.local import LocalManager

        return LocalManager(store, data_dir, slots, master_url, on_exit)
    if kind == "slurm":  # its slots are the partition's, from sinfo
        from det_sdk.master.resources.slurm import SlurmManager

        return SlurmManager(store, data_dir, master_url, on_exit, **options)
    raise UsageError(f"unknown resource manager {kind!r}; expected one of {', '.join(KINDS)}")
