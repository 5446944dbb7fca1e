"""Scheduling: which queued trials and jobs start when slots are free, how they are
launched, and what their exits mean. Every state it changes goes through the lifecycle.

A background loop calls :meth:`Scheduler.schedule` whenever something may have
become runnable (an experiment created or activated, a process exited) and once a
second anyway. A launch that raises (the workdir cannot be unpacked, the environment
is too large for ``execve``, ...) ends the trial ERROR with the reason, never leaves
it RUNNING without a process.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from det_sdk.config import ExperimentConfig
from det_sdk.master.checkpoints import Checkpoints
from det_sdk.master.lifecycle import (
    JobEvent,
    JobState,
    Lifecycle,
    TrialEvent,
    TrialState,
    exit_event,
)
from det_sdk.master.queue import Holder, Waiting, order_key, pick_victims, priority_of
from det_sdk.master.resources import ResourceManager, task_env
from det_sdk.master.root_cause import TAIL_LINES as LOG_TAIL_LINES
from det_sdk.master.root_cause import failure_note, last_error, read_tail, root_cause
from det_sdk.master.rows import AllocationRow, ExperimentRow, JobRow, TrialRow
from det_sdk.master.search import Search
from det_sdk.master.store import Store
from det_sdk.master.task_files import files_kept, keep_and_clear

__all__ = ["LOG_TAIL_LINES", "Scheduler"]

log = logging.getLogger("det_sdk.master.scheduler")

_WITH_PROCESS = {TrialState.RUNNING.value, TrialState.STOPPING_PAUSED.value,
                 TrialState.STOPPING_CANCELED.value}
_JOB_WITH_PROCESS = {JobState.RUNNING.value, JobState.STOPPING_PAUSED.value,
                     JobState.STOPPING_CANCELED.value}


class Plan(Protocol):
    """A scheduling policy's view of one pass: the queue's order, whether a task may take
    slots now, what to do when the head does not fit, and what a launch changes."""

    def key(self, w: Waiting) -> Any: ...

    def may_take(self, w: Waiting) -> bool: ...

    def blocked(self, w: Waiting) -> None: ...

    def took(self, w: Waiting) -> None: ...


class PriorityPlan:
    """Determined's priority scheduler: priority, then submission; the head that does
    not fit preempts lower-priority trials."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def key(self, w: Waiting) -> Any:
        return order_key(w)

    def may_take(self, w: Waiting) -> bool:
        return True

    def blocked(self, w: Waiting) -> None:
        self.scheduler._preempt_for(w)

    def took(self, w: Waiting) -> None:
        pass


class Scheduler:
    """Starts queued tasks within the launcher's slots and turns exits into events."""

    def __init__(self, store: Store, lifecycle: Lifecycle, launcher: ResourceManager,
                 data_dir: Path,
                 config_of: Callable[[int], ExperimentConfig], search: Search,
                 checkpoints: Checkpoints) -> None:
        self.store = store
        self.lifecycle = lifecycle
        self.launcher = launcher
        self.data_dir = data_dir
        self.config_of = config_of
        self.search = search
        self.checkpoints = checkpoints
        self.wakeup = threading.Event()
        self._stop = threading.Event()
        # other kinds of task (det_sdk.master.commands): launched in each pass, after the
        # jobs, from the same free slots; their exits handed back by allocation task_type
        self.task_queues: list[Callable[[], None]] = []
        self.exit_handlers: dict[str, Callable[[AllocationRow, int], None]] = {}
        # det master up --scheduler: "priority" (Determined's default) or "fair_share"
        self.policy = "priority"

    def logs_path(self, kind: str, task_id: int) -> Path:
        return self.data_dir / kind / str(task_id) / "logs.txt"

    def files_path(self, kind: str, task_id: int) -> Path:
        """Where the files a trial or job wrote into its working directory are kept."""
        return self.data_dir / kind / str(task_id) / "files"

    def workdir(self, kind: str, task_id: int) -> Path:
        return self.data_dir / kind / str(task_id) / "workdir"

    def keep_files(self, kind: str, task_id: int) -> None:
        """An ended task's working directory goes, what the task wrote there kept first
        (det_sdk.master.task_files); a log line when some of it did not fit. Slow (a
        task may have written 50,000 files): called in the master's disk-work thread."""
        note = keep_and_clear(self.workdir(kind, task_id), self.files_path(kind, task_id))
        if note:
            self._append_log(kind, task_id, f"det_sdk: {note}\n")

    def files_kept(self, kind: str, task_id: int) -> bool:
        """Whether an ended task's kept files are whole (det_sdk.master.task_files)."""
        return files_kept(self.workdir(kind, task_id), self.files_path(kind, task_id))

    # --- the loop -------------------------------------------------------------------------

    def start(self) -> None:
        threading.Thread(target=self._loop, daemon=True, name="scheduler").start()

    def stop(self) -> None:
        self._stop.set()
        self.wakeup.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.schedule()
            except Exception:  # the loop must outlive one bad task
                log.exception("scheduling failed")
            self.wakeup.wait(1.0)
            self.wakeup.clear()

    def schedule(self) -> None:
        """Start what waits for slots in the queue's order (det_sdk.master.queue):
        commands first come, first served as before; then queued batch jobs and queued
        trials of ACTIVE experiments by priority, then submission time (the ``priority``
        policy) or by each user's share of the slots (``fair_share``:
        det_sdk.master.fair_share). The head that does not fit stops the pass (no
        backfill) and may preempt trials: lower-priority ones, or those of users above
        their share.

        Reads only what can start: an idle master with 10,000 queued trials behind a
        ``max_concurrent_trials`` limit does a few small queries a second.
        """
        with self.lifecycle.lock:
            for launch_queued in self.task_queues:
                launch_queued()
            waiting = self._waiting()
            if not waiting:
                return
            if self.policy == "fair_share":
                from det_sdk.master.fair_share import FairSharePlan

                plan: Plan = FairSharePlan(self, waiting)
            else:
                plan = PriorityPlan(self)
            self._pass(sorted(waiting, key=plan.key), plan)

    def _pass(self, ordered: list[Waiting], plan: Plan) -> None:
        running = self.store.trial_counts(_WITH_PROCESS)
        held = self._held_by_experiment()
        blocked: set[int] = set()  # experiments at a limit: their other trials wait
        for w in ordered:
            if w.kind == "job" and w.slots > self.launcher.slots:
                continue  # a master restarted with fewer slots: it never fits, nor blocks
            if w.kind == "trial":
                t, exp, cfg = w.extra["row"], w.extra["exp"], w.extra["cfg"]
                if exp["id"] in blocked:
                    continue
                if w.slots > self.launcher.slots:
                    # refused at create; possible if the master restarted with fewer slots
                    self.lifecycle.trial_event(t["id"], TrialEvent.SCHEDULED)
                    self._launch_failed(t["id"], (
                        f"resources.slots_per_trial is {w.slots}; "
                        f"this master has {self.launcher.slots} slots"))
                    continue
                limit = cfg.searcher.max_concurrent_trials if cfg.searcher else 0
                max_slots = cfg.resources.max_slots
                if (limit and running.get(exp["id"], 0) >= limit) or (
                        max_slots is not None and held.get(exp["id"], 0) + w.slots > max_slots):
                    blocked.add(exp["id"])
                    continue
            if not plan.may_take(w):
                continue
            if w.slots > self.launcher.free_slots():
                plan.blocked(w)
                return  # the queue's order: do not starve big trials
            if w.kind == "job":
                self._launch_job(w.extra["row"])
            else:
                self._launch_trial(t, exp, cfg)
                running[exp["id"]] = running.get(exp["id"], 0) + 1
                held[exp["id"]] = held.get(exp["id"], 0) + w.slots
            plan.took(w)

    def _waiting(self) -> list[Waiting]:
        """Queued batch jobs and queued trials of ACTIVE experiments (at most a master's
        worth of slots of each experiment: more could never start in one pass)."""
        waiting = [Waiting("job", j["id"], priority_of(j["config"]), j["created"],
                           int(j["config"]["resources"]["slots"]), {"row": j})
                   for j in self.store.jobs_in_states([JobState.QUEUED.value])]
        for exp in self.store.experiments_in_states(["ACTIVE"]):
            for t in self.store.trials_in_states([TrialState.QUEUED.value], exp["id"],
                                                 limit=self.launcher.slots + 1):
                cfg = self.config_of(t["id"])
                waiting.append(Waiting("trial", t["id"], cfg.resources.priority,
                                       exp["created"], cfg.resources.slots_per_trial,
                                       {"row": t, "exp": exp, "cfg": cfg}))
        return waiting

    def _held_by_experiment(self) -> dict[int, int]:
        """Slots each experiment's trials hold now (``resources.max_slots``)."""
        held: dict[int, int] = {}
        for a in self.store.running_allocations():
            t = self.store.trial(a["trial_id"]) if a["trial_id"] is not None else None
            if t is not None:
                held[t["experiment_id"]] = held.get(t["experiment_id"], 0) + int(a["slots"])
        return held

    def running_holders(self) -> tuple[int, list[Holder]]:
        """The slots already being freed (trials asked to stop), and the preemptible
        running allocations (trials; batch jobs and commands are not preemptible)."""
        freeing = 0
        holders: list[Holder] = []
        for a in self.store.running_allocations():
            if a["trial_id"] is None:
                continue
            t = self.store.trial(a["trial_id"])
            if t is None:
                continue
            if a["preempt"] or t["state"] != TrialState.RUNNING.value:
                freeing += int(a["slots"])
                continue
            cfg = self.config_of(t["id"])
            exp = self.store.experiment(t["experiment_id"])
            holders.append(Holder(a["id"], int(a["slots"]), cfg.resources.priority,
                                  a["started"], exp["owner_id"] if exp else None))
        return freeing, holders

    def _preempt_for(self, w: Waiting) -> None:
        """Ask lower-priority trials to stop so that ``w`` can start (det_sdk.master.queue):
        the slots already being freed count first."""
        if self.launcher.kind == "slurm":
            return
        freeing, holders = self.running_holders()
        need = w.slots - self.launcher.free_slots() - freeing
        if need > 0:  # else enough is on its way: preempting more would thrash
            self.preempt(pick_victims(need, w.priority, holders), w)

    def preempt(self, victims: list[Holder], w: Waiting) -> None:
        """Mark the victims' allocations to stop (their preemption signal says yes: they
        checkpoint and exit, and queue again: ``TrialEvent.PREEMPTED``). Slurm shares its
        cluster itself (the priority goes to it as ``--nice``): nothing is preempted there."""
        if self.launcher.kind == "slurm":
            return
        for v in victims:
            alloc = self.store.allocation(v.alloc_id)
            log.info("preempting allocation %s (priority %d) for %s %d (priority %d)",
                     v.alloc_id, v.priority, w.kind, w.id, w.priority)
            self.store.update_allocation(v.alloc_id, preempt=1)
            if alloc is not None and alloc["trial_id"] is not None:
                self._append_log("trials", alloc["trial_id"], (
                    f"det_sdk: preempted for {w.kind} {w.id} ({self.policy} scheduler): it "
                    "checkpoints, stops and waits in the queue\n"))
        if victims:
            self.lifecycle.on_stop_requested()  # wakes the preemption long-polls

    # --- launching ------------------------------------------------------------------------

    def _launch_trial(self, t: TrialRow, exp: ExperimentRow,
                      cfg: ExperimentConfig) -> None:
        config = dict(exp["config"])
        config["checkpoint_storage"] = cfg.checkpoint_storage.for_trials(
            self.checkpoints.directory(cfg))
        env = task_env({
            "DET_EXPERIMENT_ID": str(exp["id"]), "DET_TRIAL_ID": str(t["id"]),
            "DET_TRIAL_SEED": str(t["seed"]), "DET_HPARAMS": t["hparams"],
            "DET_LATEST_CHECKPOINT": t["latest_checkpoint"], "DET_EXPERIMENT_CONFIG": config,
        })
        self.launcher.launching_trial = t["id"]  # before its state is RUNNING
        try:
            self.lifecycle.trial_event(t["id"], TrialEvent.SCHEDULED)
            try:
                self.launcher.launch(
                    task_type="TRIAL", task_id=t["id"], archive=exp["archive"],
                    workdir=self.data_dir / "trials" / str(t["id"]) / "workdir",
                    entrypoint=cfg.entrypoint_script or "",
                    slots=cfg.resources.slots_per_trial,
                    env=env, log_path=self.logs_path("trials", t["id"]),
                    per_node=cfg.entrypoint_runs == "per_node",
                )
            except Exception as err:
                self._launch_failed(t["id"], f"{type(err).__name__}: {err}")
        finally:
            self.launcher.launching_trial = None  # its allocation says the rest

    def _launch_failed(self, trial_id: int, reason: str) -> None:
        log.warning("trial %s could not be launched: %s", trial_id, reason)
        self.lifecycle.trial_event(trial_id, TrialEvent.LAUNCH_FAILED,
                                   last_error=f"launch failed: {reason}")

    def _launch_job(self, j: JobRow) -> None:
        config = j["config"]
        env = task_env({"DET_EXPERIMENT_CONFIG": config})
        self.lifecycle.job_event(j["id"], JobEvent.SCHEDULED)
        try:
            self.launcher.launch(
                task_type="GENERIC", task_id=j["id"], archive=j["archive"],
                workdir=self.data_dir / "jobs" / str(j["id"]) / "workdir",
                entrypoint=config["entrypoint_script"], slots=config["resources"]["slots"],
                env=env, log_path=self.logs_path("jobs", j["id"]),
            )
        except Exception as err:
            log.warning("job %s could not be launched: %s", j["id"], err)
            self.lifecycle.job_event(j["id"], JobEvent.LAUNCH_FAILED, exit_code=None)
            self._append_log("jobs", j["id"], f"launch failed: {type(err).__name__}: {err}\n")

    def _append_log(self, kind: str, task_id: int, text: str) -> None:
        path = self.logs_path(kind, task_id)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a") as f:
                f.write(text)
        except OSError as err:  # the reason is in the master's log either way
            log.warning("cannot write %s: %s", path, err)

    # --- exits ----------------------------------------------------------------------------

    def on_exit(self, alloc: AllocationRow, code: int) -> None:
        """The launcher saw a task's processes end with ``code``."""
        with self.lifecycle.lock:
            handler = self.exit_handlers.get(alloc["task_type"])
            if handler is not None:
                handler(alloc, code)
            elif alloc["task_type"] == "GENERIC":
                self._job_exited(alloc, code)
            else:
                trial_id = alloc["trial_id"]
                assert trial_id is not None  # a trial's allocation
                self._trial_exited(trial_id, code, alloc)
        self.checkpoints.empty_trash()  # the sweep's, deleted without the lock
        self.wakeup.set()

    def _job_exited(self, alloc: AllocationRow, code: int) -> None:
        """As a trial's exit (:func:`exit_event`): a stop it acknowledged, the end, or a
        failure (launched again while restarts are left)."""
        job = self.store.job(alloc["job_id"]) if alloc["job_id"] is not None else None
        if job is None or job["state"] not in _JOB_WITH_PROCESS:
            return
        finished = not alloc.get("preempt_acked")
        event = JobEvent(exit_event(code, finished, job["restarts"],
                                    job["config"].get("max_restarts", 0)).value)
        if code != 0:  # jobs have no last_error: the root cause ends their log
            note = failure_note(alloc, self.logs_path("jobs", job["id"]), code)
            if event is JobEvent.EXITED_FAILED and job["state"] == JobState.RUNNING.value:
                note += (f"; launched again ({job['restarts'] + 1} of "
                         f"{job['config']['max_restarts']} restarts)")
            self._append_log("jobs", job["id"], f"det_sdk: job {job['id']} {note}\n")
        self.lifecycle.job_event(job["id"], event, exit_code=code)

    def _trial_exited(self, trial_id: int, code: int, alloc: AllocationRow | None = None
                      ) -> None:
        t = self.store.trial(trial_id)
        if t is None:
            return
        cfg = self.config_of(trial_id)
        if code != 0:  # a damaged checkpoint is never restored from twice
            failure = root_cause(alloc, read_tail(self.logs_path("trials", trial_id)))
            note = self.checkpoints.damaged_on_restore(trial_id, failure)
            if note:
                self._append_log("trials", trial_id, f"det_sdk: trial {trial_id}: {note}\n")
        # A task that acknowledged a stop request stopped: not finished, whatever the
        # searcher recorded (a pause in a fit after the searched one)
        finished = self.search.finished(t) and not (alloc and alloc.get("preempt_acked"))
        event = exit_event(code, finished, t["restarts"], cfg.max_restarts)
        if (event is TrialEvent.EXITED_STOPPED and alloc and alloc.get("preempt")
                and t["state"] == TrialState.RUNNING.value):
            event = TrialEvent.PREEMPTED  # the queue's stop: it waits for slots again
        fields: dict[str, Any] = {}
        if event is TrialEvent.EXITED_FAILED_FINAL:
            # the first failing rank's own exception, then the log's tail (bounded)
            fields["last_error"] = last_error(alloc, self.logs_path("trials", trial_id), code,
                                              restarts=t["restarts"])
        self.lifecycle.trial_event(trial_id, event, **fields)
        self.sweep_idle_checkpoint_dirs()

    def sweep_idle_checkpoint_dirs(self) -> None:
        """Delete unrecorded checkpoint directories under every storage no running trial
        writes to (a running trial's report may still be on its way); the object stores'
        unrecorded checkpoints go in a thread of their own (a listing is a request)."""
        running = [self.config_of(a["trial_id"]) for a in self.store.running_allocations()
                   if a["trial_id"] is not None]
        configs = [self.config_of(t["id"]) for t in self.store.trials()]
        busy = {self.checkpoints.directory(c) for c in running}
        bases = {self.checkpoints.directory(c) for c in configs} - busy
        self.checkpoints.sweep_unrecorded(sorted(bases))
        # storages are one object per config (Checkpoints.storage): compared by identity
        saving = {id(self.checkpoints.storage(c)) for c in running}
        idle = {id(s): s for s in map(self.checkpoints.storage, configs) if id(s) not in saving}
        self.checkpoints.sweep_unrecorded_objects_soon(idle.values(), self._storage_idle)

    def _storage_idle(self, storage: Any) -> bool:
        """Whether no running trial saves to ``storage`` (asked again under the lock by
        the object stores' sweep)."""
        return not any(self.checkpoints.storage(self.config_of(a["trial_id"])) is storage
                       for a in self.store.running_allocations() if a["trial_id"] is not None)

    def job_ended(self, job: JobRow) -> None:
        """A job's directory and upload go when it ends; its log and the files it wrote
        into the directory stay (in the disk-work thread: :meth:`keep_files`)."""
        self.keep_files("jobs", job["id"])
        Path(job["archive"]).unlink(missing_ok=True)

    # --- a master restart -----------------------------------------------------------------

    def recover(self) -> None:
        """After a restart: watch the processes that outlived the previous master, and end
        the tasks whose process did not (left RUNNING or STOPPING by a crash)."""
        with self.lifecycle.lock:
            running = self.store.running_allocations()
            with_process = {a["trial_id"] for a in running if a["trial_id"] is not None}
            jobs_with_process = {a["job_id"] for a in running if a["job_id"] is not None}
            for t in self.store.trials():
                if t["state"] in _WITH_PROCESS:
                    event = (TrialEvent.ADOPTED if t["id"] in with_process
                             else TrialEvent.MASTER_RESTARTED)
                    self.lifecycle.trial_event(t["id"], event)
            self.lifecycle.settle_unfinished()  # a crash between a trial's and its experiment's
            for j in self.store.jobs():
                if j["state"] in _JOB_WITH_PROCESS and j["id"] not in jobs_with_process:
                    self.lifecycle.job_event(j["id"], JobEvent.MASTER_RESTARTED)
            for alloc in running:
                self.launcher.adopt(alloc)
