"""The Slurm resource manager: each task is one Slurm job.

``det master up --resource-manager slurm [--partition P] [--account A]
[--slurm-option ...]`` makes the master submit its trials and jobs to Slurm instead of
starting processes itself. Slurm reserves all of a task's slots at once (possibly on
several nodes), binds GPUs and queues fairly; det_sdk submits, watches and cancels.

- **Submission.** A task with N slots is ``sbatch --ntasks=N`` (``--gpus-per-task=1``
  where the partition has GPUs; one CPU per task otherwise, or what a
  ``--slurm-option=--cpus-per-task=K`` says). The job's batch step
  (:mod:`det_sdk.master.resources.slurm_step`) starts Horovod's rendezvous server and
  ``srun``\\ s one process per rank with Horovod's variables: no ssh, no ``horovodrun``.
  The task's ``DET_*`` environment (its token among them) goes to the job in an
  owner-only file, not through Slurm's job records.
- **Shared paths.** Working directories, logs, the job files and (unless a config's
  ``checkpoint_storage.host_path`` says otherwise) checkpoints live under the master's
  ``--shared-dir``, which every node must see at the same path; so must det_sdk's
  Python environment.
- **Watching.** One ``squeue`` a second lists this user's jobs: a PENDING job's reason
  is kept on its allocation (``describe`` shows the trial QUEUED with it); a job that
  ended, or that ``squeue`` no longer lists, ends its allocation with the exit status
  the batch step recorded (``sacct``'s, where accounting runs and nothing was recorded).
- **Stopping.** A kill is ``scancel --signal=TERM`` to the job's ranks, then, after the
  grace, ``scancel --full --signal=KILL``; a job still waiting in the queue is simply
  cancelled, and counts as a clean stop (it never ran). A pause reaches a running job
  through the preemption long-poll like any trial; a waiting one is cancelled.
- **Restarts.** The Slurm job id is stored on the allocation; a restarted master
  adopts its RUNNING allocations and goes on watching their jobs (a job whose id was
  not stored yet is found by its name, ``det-<allocation id>``).
- **Capacity.** ``slots`` is the partition's total from ``sinfo`` (GPUs, else CPUs per
  task): a trial that asks for more is refused at create. The scheduler keeps up to
  twice that many slots' worth of tasks submitted; Slurm decides which run.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from det_sdk.errors import DetSdkError
from det_sdk.master.resources import (
    ResourceManager,
    exit_file,
    process_env,
    recorded_exit,
)
from det_sdk.master.root_cause import record_dir
from det_sdk.master.rows import AllocationRow
from det_sdk.master.startup_hook import hook_prefix

__all__ = ["Capacity", "SlurmError", "SlurmManager", "cpus_per_task", "gres_gpus",
           "sbatch_command", "slurm_nice"]

log = logging.getLogger("det_sdk.master.resources.slurm")

# squeue's states of a job whose processes may still run
_WAITING = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}
_ACTIVE = {"CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING",
           "STAGE_OUT", "RESIZING"}
# a job that ended but whose exit status file is not there yet: wait this long for it
# (a shared filesystem may show it late) before taking Slurm's word for how it ended
_EXIT_FILE_WAIT = 3.0
# how much the scheduler may have submitted, in multiples of the partition's slots
QUEUE_FACTOR = 2


class SlurmError(DetSdkError, RuntimeError):
    """A Slurm command failed; the message has its output."""


def _run(args: Sequence[str], timeout: float = 60, env: dict[str, str] | None = None,
         umask: int = -1) -> str:
    try:
        proc = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout,
                              env=env, umask=umask)
    except FileNotFoundError:
        raise SlurmError(f"{args[0]}: not found; is Slurm's client installed (and on PATH)?"
                         ) from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{shlex.join(args)}: no answer within {timeout:.0f} s") from None
    if proc.returncode != 0:
        raise SlurmError(f"{shlex.join(args)}: {(proc.stderr or proc.stdout).strip()}")
    return proc.stdout


def gres_gpus(gres: str) -> int:
    """The GPUs in a node's ``Gres`` as ``sinfo`` prints it.

    >>> gres_gpus("gpu:2"), gres_gpus("gpu:a100:4(S:0-1),shard:8"), gres_gpus("(null)")
    (2, 4, 0)
    """
    total = 0
    for item in gres.split(","):
        parts = re.sub(r"\(.*?\)", "", item).split(":")
        if parts[0] == "gpu" and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def cpus_per_task(options: Sequence[str]) -> int:
    """The CPUs each task asks for among extra sbatch options (1 if none say).

    >>> cpus_per_task(["--qos=high", "--cpus-per-task=4"]), cpus_per_task(["-c", "2"])
    (4, 2)
    """
    options = list(options)
    n = 1
    for i, opt in enumerate(options):
        m = re.fullmatch(r"(?:--cpus-per-task=|-c)(\d+)", opt)
        if m:
            n = int(m.group(1))
        elif opt in ("--cpus-per-task", "-c") and i + 1 < len(options):
            n = int(options[i + 1])
    return max(n, 1)


@dataclass(frozen=True)
class Capacity:
    """A partition's size as ``sinfo`` reports it."""

    partition: str
    nodes: int
    cpus: int
    gpus: int

    def slots(self, cpus_each: int = 1) -> int:
        """Slots: GPUs where the partition has them, else tasks of ``cpus_each`` CPUs."""
        return self.gpus if self.gpus else self.cpus // cpus_each

    @classmethod
    def from_sinfo(cls, lines: str, partition: str | None) -> Capacity:
        """From ``sinfo -h -N -o '%N|%c|%G|%P'``: ``partition``'s nodes (or the default
        partition's, the one sinfo marks with ``*``).

        >>> Capacity.from_sinfo("n1|2|(null)|debug*\\nn2|2|gpu:1|debug*\\nn1|2|(null)|one", None)
        Capacity(partition='debug', nodes=2, cpus=4, gpus=1)
        """
        rows = [line.split("|") for line in lines.splitlines() if line.count("|") >= 3]
        if partition is None:
            defaults = {r[3].rstrip("*") for r in rows if r[3].endswith("*")}
            if not defaults:
                raise SlurmError("Slurm has no default partition: give one with --partition")
            partition = defaults.pop()
        nodes = {r[0]: r for r in rows if r[3].rstrip("*") == partition}
        if not nodes:
            known = sorted({r[3].rstrip("*") for r in rows})
            raise SlurmError(f"Slurm has no partition {partition!r} (it has: "
                             f"{', '.join(known) or 'none'})")
        return cls(partition, len(nodes), sum(int(r[1]) for r in nodes.values()),
                   sum(gres_gpus(r[2]) for r in nodes.values()))


def sbatch_command(*, name: str, ntasks: int, gpus: bool, workdir: Path, log_path: Path,
                   script: Path, partition: str | None, account: str | None,
                   options: Sequence[str]) -> list[str]:
    """The ``sbatch`` command line of one task (the user's extra options last: they win).

    >>> sbatch_command(name="det-x", ntasks=4, gpus=False, workdir=Path("/w"),
    ...     log_path=Path("/l.txt"), script=Path("/s"), partition="debug", account=None,
    ...     options=["--qos=high"])[1:]  # doctest: +NORMALIZE_WHITESPACE
    ['--parsable', '--job-name=det-x', '--ntasks=4', '--chdir=/w', '--output=/l.txt',
     '--open-mode=append', '--no-requeue', '--partition=debug', '--qos=high', '/s']
    """
    command = ["sbatch", "--parsable", f"--job-name={name}", f"--ntasks={ntasks}"]
    if gpus:
        command.append("--gpus-per-task=1")
    # --no-requeue: after a node failure the master restarts the trial from its
    # checkpoint; a job Slurm requeued would start it again behind the master's back
    command += [f"--chdir={workdir}", f"--output={log_path}", "--open-mode=append",
                "--no-requeue"]
    if partition:
        command.append(f"--partition={partition}")
    if account:
        command.append(f"--account={account}")
    return [*command, *options, str(script)]


def slurm_nice(env: dict[str, str]) -> list[str]:
    """The task's ``resources.priority`` as Slurm's ``--nice``: Slurm orders its own queue
    and shares its cluster itself, so det_sdk preempts nothing there and hands it the
    priority instead. A priority above Determined's default 42 (a lower one) is
    ``--nice=(p - 42) * 100``; 1-42 submit at nice 0, since Slurm lets only its operators
    set a negative nice.

    >>> slurm_nice({"DET_EXPERIMENT_CONFIG": '{"resources": {"priority": 50}}'})
    ['--nice=800']
    >>> slurm_nice({"DET_EXPERIMENT_CONFIG": '{"resources": {"priority": 10}}'}), slurm_nice({})
    ([], [])
    """
    try:
        config = json.loads(env.get("DET_EXPERIMENT_CONFIG") or "{}")
        priority = int((config.get("resources") or {}).get("priority", 42))
    except (ValueError, TypeError, AttributeError):
        return []
    return [f"--nice={(priority - 42) * 100}"] if priority > 42 else []


class SlurmManager(ResourceManager):
    """Runs each task as one Slurm job in ``partition`` (Slurm's default if None)."""

    kind = "slurm"
    launching_reason = "Submitting"  # not in Slurm's queue yet: never shown RUNNING
    poll_seconds = 1.0

    def __init__(self, store: Any, data_dir: Path, master_url: str,
                 on_exit: Callable[[dict[str, Any], int], None], *,
                 partition: str | None = None, account: str | None = None,
                 slurm_options: Sequence[str] = (),
                 wants_stop: Callable[[str], bool] | None = None) -> None:
        self.options = list(slurm_options)
        self.account = account
        conf = os.environ.get("SLURM_CONF")
        if conf and not Path(conf).is_file():  # Slurm's commands would look for a server
            raise SlurmError(f"SLURM_CONF names {conf}, which is not a file")
        self.capacity = Capacity.from_sinfo(
            _run(["sinfo", "-h", "-N", "-o", "%N|%c|%G|%P"], timeout=30), partition)
        self.partition = partition  # None: sbatch uses Slurm's default, as sinfo showed it
        super().__init__(store, data_dir, self.capacity.slots(cpus_per_task(self.options)),
                         master_url, on_exit)
        self.wants_stop = wants_stop or (lambda alloc_id: False)
        self._states: dict[str, str] = {}  # Slurm job id -> its state at the last poll
        self._ended_at: dict[str, float] = {}  # allocation id -> when its job was seen ended
        self._poll_failed = 0.0
        log.info("Slurm partition %s: %d nodes, %d CPUs, %d GPUs: %d slots",
                 self.capacity.partition, self.capacity.nodes, self.capacity.cpus,
                 self.capacity.gpus, self.slots)

    # --- what the scheduler asks ------------------------------------------------------------

    def capacity_note(self) -> str:
        unit = "GPUs" if self.capacity.gpus else "CPU slots"
        nodes = f"{self.capacity.nodes} node{'s' if self.capacity.nodes != 1 else ''}"
        return f" {unit} in Slurm partition {self.capacity.partition!r} on {nodes}"

    def free_slots(self) -> int:
        """Submitted tasks may wait in Slurm's queue: up to :data:`QUEUE_FACTOR` times the
        partition's slots are submitted, and Slurm decides which run."""
        used = sum(a["slots"] for a in self.store.running_allocations())
        return QUEUE_FACTOR * self.slots - used

    # --- launching --------------------------------------------------------------------------

    def launch(self, *, task_type: str, task_id: int, archive: str, workdir: Path,
               entrypoint: str, slots: int, env: dict[str, str], log_path: Path,
               per_node: bool = False) -> str:
        if per_node and slots > 1:
            raise SlurmError(
                "Slurm runs every entrypoint once per slot (srun per rank); a per-node "
                f"entrypoint (Determined's `entrypoint:` command) with {slots} slots would "
                "start its launcher on every rank. Write entrypoint_script: (one process per "
                "slot) for this trial on Slurm")
        alloc_id, token = self._new_task(task_type, task_id, archive, workdir)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        spec_path, script = self._job_files(workdir, alloc_id)
        spec = {
            # the job gets the master's environment from sbatch; only PYTHONPATH goes in
            # the base too, so that the task's (with det_sdk's `determined` names after it)
            # extends the master's instead of replacing it (a user's modules, a checkout)
            "env": {k: v for k, v in process_env(env, self.master_url, token, alloc_id,
                                                 task_type, base=_python_path()).items()
                    if k != "PATH"},
            # Determined's startup-hook.sh, if any, sourced first (in each rank's shell)
            "entrypoint": hook_prefix(workdir) + entrypoint,
            "exit_file": str(exit_file(workdir, alloc_id)),
            # each rank runs under det_sdk.launch.catch, which writes its failure here
            "record_dir": str(record_dir(workdir, alloc_id)),
        }
        fd = os.open(spec_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(spec, f)
        script.write_text(
            "#!/bin/sh\n"
            f"# det_sdk: {task_type.lower()} {task_id}, allocation {alloc_id} "
            "(det_sdk.master.resources.slurm)\n"
            f"exec {shlex.quote(sys.executable)} -m det_sdk.master.resources.slurm_step "
            f"batch {shlex.quote(str(spec_path))}\n")
        # the allocation first: a master that dies during sbatch finds the job by its name
        self.store.create_allocation({
            "id": alloc_id, "task_type": task_type,
            "trial_id": task_id if task_type == "TRIAL" else None,
            "job_id": task_id if task_type == "GENERIC" else None,
            "token": token, "state": "RUNNING", "pid": None, "slots": slots,
            "workdir": str(workdir), "started": time.time(), "queue_reason": "Submitted",
        })
        command = sbatch_command(
            name=f"det-{alloc_id}", ntasks=slots, gpus=bool(self.capacity.gpus),
            workdir=workdir, log_path=log_path, script=script, partition=self.partition,
            account=self.account, options=[*slurm_nice(env), *self.options])
        try:
            out = _run(command, env=_submit_env(), umask=self.task_umask)
        except SlurmError:
            # nothing runs: the allocation ends here (its token with it); the scheduler
            # ends the task with the reason
            self.store.update_allocation(alloc_id, state="EXITED", ended=time.time(),
                                         queue_reason=None)
            spec_path.unlink(missing_ok=True)
            raise
        job_id = out.strip().split(";")[0]
        self.store.update_allocation(alloc_id, rm_id=job_id)
        self._states[job_id] = "PENDING"
        log.info("%s: Slurm job %s (%d tasks)", alloc_id, job_id, slots)
        self._wake.set()
        return alloc_id

    def _job_files(self, workdir: Path, alloc_id: str) -> tuple[Path, Path]:
        return (workdir.parent / f"{alloc_id}.job.json", workdir.parent / f"{alloc_id}.sbatch")

    # --- watching ---------------------------------------------------------------------------

    def _watch(self, alloc: AllocationRow) -> None:
        self._wake.set()  # the poll watches every RUNNING allocation; look now

    def _poll(self) -> None:
        allocs = self.store.running_allocations()
        if not allocs:
            return
        try:
            listing = _run(["squeue", "-h", "--me", "--states=all", "-o", "%i|%T|%r|%j"])
            self._poll_failed = 0.0
        except SlurmError as err:
            if time.time() - self._poll_failed > 60:  # say so once a minute, not each second
                log.warning("cannot see Slurm's queue: %s", err)
                self._poll_failed = time.time()
            return
        jobs: dict[str, tuple[str, str]] = {}
        by_name: dict[str, str] = {}
        for line in listing.splitlines():
            listed_id, state, reason, name = [*line.split("|", 3), "", "", ""][:4]
            jobs[listed_id] = (state, reason)
            by_name[name] = listed_id
        for alloc in allocs:
            job_id = alloc["rm_id"]
            if job_id is None:
                job_id = by_name.get(f"det-{alloc['id']}")
                if job_id is not None:
                    self.store.update_allocation(alloc["id"], rm_id=job_id)
                elif time.time() - alloc["started"] > 60:
                    # never submitted (the master died before sbatch did it)
                    self._end(alloc, None)
                continue
            state, reason = jobs.get(job_id, ("", ""))
            self._states[job_id] = state
            if state in _WAITING:
                why = reason if reason and reason != "None" else "Pending"
                if why != alloc["queue_reason"]:
                    self.store.update_allocation(alloc["id"], queue_reason=why)
                if self.wants_stop(alloc["id"]):
                    self._cancel_waiting(alloc, job_id)
            elif state in _ACTIVE:
                if alloc["queue_reason"] is not None:
                    self.store.update_allocation(alloc["id"], queue_reason=None)
            else:  # ended (COMPLETED, FAILED, CANCELLED, ...) or no longer listed
                self._end(alloc, state or None)

    def _end(self, alloc: AllocationRow, state: str | None) -> None:
        """The job is over: finish the allocation with the batch step's exit status."""
        code = recorded_exit(alloc)
        if code is None:
            first = self._ended_at.setdefault(alloc["id"], time.time())
            if time.time() - first < _EXIT_FILE_WAIT:
                return  # a shared filesystem may show the file a moment later
            code = self._slurm_exit(alloc["rm_id"], state)
            log.info("%s: Slurm job %s ended (%s) without recording an exit status: %s",
                     alloc["id"], alloc["rm_id"], state or "no longer listed", code)
        self._ended_at.pop(alloc["id"], None)
        if alloc["rm_id"]:
            self._states.pop(alloc["rm_id"], None)
        if alloc["workdir"]:
            self._job_files(Path(alloc["workdir"]), alloc["id"])[0].unlink(missing_ok=True)
        self._finish(alloc["id"], code)

    def _slurm_exit(self, job_id: str | None, state: str | None) -> int:
        """How Slurm says a job ended that recorded nothing itself: ``sacct`` where
        accounting runs, else a failure (it was killed, or never started)."""
        if job_id:
            with contextlib.suppress(SlurmError, ValueError, IndexError):
                out = _run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State,ExitCode"],
                           timeout=10)
                status, code = out.splitlines()[0].split("|")
                exit_code, sig = (int(x) for x in code.split(":"))
                if status.startswith("COMPLETED"):
                    return exit_code
                return exit_code or 128 + (sig or 9)
        return 128 + 9

    # --- stopping ---------------------------------------------------------------------------

    def _job_id(self, alloc: AllocationRow | dict[str, Any]) -> str | None:
        if alloc.get("rm_id"):
            return alloc["rm_id"]
        row = self.store.allocation(alloc["id"])
        return row["rm_id"] if row else None

    def _cancel_waiting(self, alloc: AllocationRow | dict[str, Any], job_id: str) -> bool:
        """Cancel the job if it still waits in the queue; True if it did (it never ran: a
        clean stop, status 0). False if it had started meanwhile."""
        try:
            _run(["scancel", "--state=PENDING", job_id])
            state = _run(["squeue", "-h", "--states=all", "-j", job_id, "-o", "%T"]).strip()
        except SlurmError as err:
            log.warning("%s: cancelling waiting Slurm job %s: %s", alloc["id"], job_id, err)
            return False
        if state in _WAITING or state in _ACTIVE:
            return False
        workdir = alloc.get("workdir")
        if workdir:
            with contextlib.suppress(FileExistsError, OSError):  # the job's own word wins
                fd = os.open(exit_file(workdir, alloc["id"]),
                             os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                os.write(fd, b"0\n")
                os.close(fd)
        log.info("%s: Slurm job %s cancelled while it waited", alloc["id"], job_id)
        self._wake.set()
        return True

    def _terminate(self, alloc: AllocationRow | dict[str, Any]) -> None:
        """SIGTERM to the job's ranks (its steps, not the batch step); a job still
        waiting is cancelled."""
        job_id = self._job_id(alloc)
        if job_id is None:
            return  # not submitted yet: the poll finds it by name, the deadline forces it
        if self._states.get(job_id, "PENDING") in _WAITING and self._cancel_waiting(alloc,
                                                                                    job_id):
            return
        try:
            _run(["scancel", "--signal=TERM", job_id])
        except SlurmError as err:
            log.warning("%s: SIGTERM to Slurm job %s: %s", alloc["id"], job_id, err)

    def _force(self, alloc: AllocationRow) -> None:
        """SIGKILL to every process of the job (the batch step too: the job ends)."""
        job_id = self._job_id(alloc)
        if job_id is None:
            return
        try:
            _run(["scancel", "--full", "--signal=KILL", job_id])
        except SlurmError:
            _run(["scancel", job_id])  # one that waits cannot be signalled: cancel it


def _python_path() -> dict[str, str]:
    """The master's ``PYTHONPATH``, as a task environment's base (empty where unset).

    >>> import os
    >>> _python_path() == ({"PYTHONPATH": os.environ["PYTHONPATH"]}
    ...                    if "PYTHONPATH" in os.environ else {})
    True
    """
    path = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": path} if path else {}


def _submit_env() -> dict[str, str]:
    """sbatch's environment (the job's, apart from the task's own file): the master's,
    without Slurm's variables of an allocation the master itself may run in, and
    without det_sdk's secrets."""
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("SLURM_") and k != "SLURM_CONF")
           and k not in ("DET_USER_TOKEN", "DET_SESSION_TOKEN", "DET_ALLOCATION_ID")}
    return env
