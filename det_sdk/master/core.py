"""The master, apart from HTTP: one object that holds the pieces and answers the API.

Each concern has its module; ``Master`` wires them together and is what the HTTP
routes (``det_sdk.master.routes``, the web UI's included) call:

- ``lifecycle``: the states of experiments, trials and jobs and the one table of
  their transitions (every state change goes through it);
- ``scheduler``: which queued task starts when, launching, exits, a restart;
- ``search``: the trials an experiment starts with and their searcher operations;
- ``checkpoints``: registration, retention and the sweep of unrecorded directories;
- ``store`` (SQLite) and ``launcher`` below them: the resource manager that runs
  tasks (``det_sdk.master.resources``: local processes or Slurm jobs, chosen once
  at start; nothing above it knows which).

Errors are the domain errors of ``det_sdk.master.errors``; ``routes.errors`` maps them
to HTTP statuses. What is cleaned up, and when: a trial's working directory when it
ends (COMPLETED, CANCELED, ERROR); an experiment's uploaded model directory when
the experiment is deleted (``det e delete``: ``det e continue`` runs an ended one
again); a job's working directory and upload when it ends; uploads that no recorded
experiment nor live job uses, and unrecorded checkpoint directories, at start-up and
(checkpoints) whenever no trial writing to their storage runs. Logs, metrics and
recorded checkpoints (within the retention policy) are kept.
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

from det_sdk.atomic import write_atomic
from det_sdk.config import ExperimentConfig, parse_experiment_config, parse_job_config
from det_sdk.config.storage import mask_config_secrets
from det_sdk.master.accounts import Accounts
from det_sdk.master.agent_users import AgentUsers
from det_sdk.master.archive import decode_archive
from det_sdk.master.checkpoints import Checkpoints
from det_sdk.master.commands import Commands
from det_sdk.master.disk_work import DiskWork
from det_sdk.master.errors import Conflict, InvalidRequest, NoSpace, NotFound, RequestError
from det_sdk.master.job_progress import job_progress
from det_sdk.master.job_records import JobRecords, throughput
from det_sdk.master.lifecycle import (
    REPORTING_STATES,
    ExperimentEvent,
    JobEvent,
    JobState,
    Lifecycle,
    TrialEvent,
    TrialState,
    next_trial_state,
)
from det_sdk.master.log_clock import LogClock
from det_sdk.master.notebooks import Notebooks
from det_sdk.master.resources import ResourceManager, make_resource_manager
from det_sdk.master.roles import Roles
from det_sdk.master.rows import AllocationRow, ExperimentRow, JobRow, TrialRow
from det_sdk.master.scheduler import Scheduler
from det_sdk.master.search import Search, planned_trials
from det_sdk.master.shells import Shells
from det_sdk.master.store import Store, hash_token
from det_sdk.master.tensorboards import Source, TensorBoards, tensorboard_dir
from det_sdk.master.webhooks import Webhooks
from det_sdk.master.workspaces import Workspaces
from det_sdk.stages import DEFAULT_STAGE, split_group, stored_group

__all__ = ["Master", "RequestError"]

log = logging.getLogger("det_sdk.master")

TERMINAL = ("COMPLETED", "CANCELED", "ERROR")
_STOPPING = ("STOPPING_PAUSED", "STOPPING_CANCELED")  # a trial's or job's process must stop
_JOB_REPORTING = ("RUNNING", *_STOPPING)  # a job's process reports progress


def _private_dir(path: Path) -> None:
    """A directory only its owner can enter (the master's data hold the user token)."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)


class Master:
    """State and behaviour of one master, backed by ``data_dir``.

    >>> m = Master(Path(tempfile.mkdtemp()), slots=1, url="http://127.0.0.1:1")  # doctest: +SKIP
    >>> m.create_experiment({"entrypoint": "true"}, archive_b64)  # doctest: +SKIP
    1
    """

    def __init__(self, data_dir: Path, slots: int, url: str, resource_manager: str = "local",
                 shared_dir: Path | None = None, **rm_options: Any) -> None:
        """``resource_manager``: where tasks run (``local`` or ``slurm``, with its
        ``rm_options``); ``shared_dir``: where tasks' working directories, logs and (by
        default) checkpoints go, a path every node sees (default: ``data_dir``)."""
        self.data_dir = data_dir
        _private_dir(data_dir)
        # what tasks read and write (a path every node shares, under Slurm)
        self.tasks_dir = shared_dir or data_dir
        self.tasks_dir.mkdir(parents=True, exist_ok=True)
        self.store = Store(data_dir / "master.db")
        for name in ("master.db", "master.db-wal", "master.db-shm"):
            if (data_dir / name).exists():
                os.chmod(data_dir / name, 0o600)
        self.url = url
        self._lock = threading.RLock()
        self.disk_work = DiskWork()  # keeping a task's files: off the lock and the loop
        self._configs: dict[int, ExperimentConfig] = {}  # by experiment id
        self._experiment_of: dict[int, int] = {}  # trial id -> experiment id
        # called (from any thread) when trials are asked to stop: wakes the long-polls
        self.preemption_listeners: list[Callable[[], None]] = []
        self.lifecycle = Lifecycle(
            self.store, self._lock, on_trial_ended=self._trial_ended,
            # an ended experiment's upload stays: det e continue unpacks it again; it goes
            # when the experiment is deleted (det_sdk.master.experiment_admin)
            on_stop_requested=self._preemption_changed, on_runnable=self._wake,
            on_job_ended=self._job_ended)
        # webhooks (issue 60): an experiment's state changes queue their events
        self.agent_users = AgentUsers(self.store)  # link-with-agent-user (issue 59)
        self.workspaces = Workspaces(self.store)  # workspaces and projects (issue 59)
        self.roles = Roles(self.store)  # who sees and changes what in them (issue 59)
        self.webhooks = Webhooks(self.store, workspace_of=self._workspace_of,
                                 workspace_exists=lambda ws: self.store.workspace(ws) is not None)
        self.lifecycle.on_experiment_state = self.webhooks.experiment_state
        self.webhooks.watch_logs(self._trial_logs, self.store.experiment)  # TASK_LOG triggers
        self.search = Search(self.store, self._lock, self.trial_config)
        # a job's progress history and metrics (issue 40), in tables of their own
        self.job_records = JobRecords(self.store)
        self.checkpoint_store = Checkpoints(self.store, self.lifecycle, self.tasks_dir,
                                            self.trial_config)
        if resource_manager == "slurm":  # its queued jobs cancelled when asked to stop
            rm_options.setdefault("wants_stop", self.should_preempt)
        self.launcher: ResourceManager = make_resource_manager(
            resource_manager, self.store, self.tasks_dir, slots, url, self._on_exit,
            **rm_options)
        self.scheduler = Scheduler(self.store, self.lifecycle, self.launcher, self.tasks_dir,
                                   self.trial_config, self.search, self.checkpoint_store)
        # `det tensorboard start`: beside the master whatever the resource manager is
        # (det_sdk.master.tensorboards says why), listening where the master listens
        self.tensorboards = TensorBoards(data_dir / "tensorboards",
                                         host=urlsplit(url).hostname or "127.0.0.1")
        # when each line of a running task's log came (issue 60: the log's records)
        self.log_clock = LogClock(self._running_logs)
        # `det cmd run` (issue 58): launched by the scheduler's loop from the same slots
        self.commands = Commands(self.store, self.scheduler, self._store_archive,
                                 self.disk_work.submit)
        self.shells = Shells(self.store, self.commands)  # det shell start: commands of sshd
        # det notebook start: commands of JupyterLab, behind the master's proxy (issue 58)
        self.notebooks = Notebooks(self.store, self.commands)
        # users, sign-in and sign-out (issue 59)
        self.accounts = Accounts(self.store)

    # --- the master itself ----------------------------------------------------------------

    def start(self) -> None:
        """Recover from the previous master (adopt or end its tasks), sweep what nothing
        uses any more, then schedule in the background."""
        self.scheduler.recover()
        self.commands.recover()  # a crash's commands: TERMINATED, their processes killed
        self.tensorboards.recover()
        self.launcher.start()
        self._sweep_uploads()
        with self._lock:
            self.scheduler.sweep_idle_checkpoint_dirs()
        self.checkpoint_store.empty_trash()
        self.webhooks.start()
        self.scheduler.start()
        self.log_clock.start()
        self.notebooks.start()  # the idle watcher (idle_timeout)

    def stop(self) -> None:
        """Stop scheduling; tasks being stopped are stopped (within their grace) before
        this returns, the others keep running for the next master to adopt."""
        self.scheduler.stop()
        self.notebooks.stop()  # no idle kill while the master goes
        self.commands.stop()  # killed: the launcher's stop below waits for them
        self.launcher.stop()
        self.tensorboards.stop()
        self.webhooks.stop()
        self.log_clock.stop()

    def _running_logs(self) -> list[Path]:
        """The log files of the trials and jobs running now (the log clock's)."""
        out = []
        for a in self.store.running_allocations():
            if a["trial_id"] is not None:
                out.append(self.logs_path("trials", a["trial_id"]))
            elif a["job_id"] is not None:
                out.append(self.logs_path("jobs", a["job_id"]))
        return out

    def user_token(self) -> str:
        """A new user token (``det master up`` stores it for the CLI)."""
        token = secrets.token_urlsafe(32)
        self.store.add_user_token(token)
        return token

    def schedule(self) -> None:
        self.scheduler.schedule()

    def _wake(self) -> None:
        scheduler = getattr(self, "scheduler", None)  # None while __init__ wires things
        if scheduler is not None:
            scheduler.wakeup.set()

    def _on_exit(self, alloc: dict[str, Any], code: int) -> None:
        # the resource managers hand back the allocation rows the store gave them
        self.scheduler.on_exit(cast(AllocationRow, alloc), code)

    def _preemption_changed(self) -> None:
        for listener in self.preemption_listeners:
            listener()

    # --- cleanup --------------------------------------------------------------------------

    def _trial_ended(self, t: TrialRow) -> None:
        """A trial reached COMPLETED, CANCELED or ERROR: its working directory goes, the
        files it wrote there kept, in the disk-work thread (called under the lock)."""
        self.disk_work.submit(f"keep trial {t['id']}'s files", self.scheduler.keep_files,
                              "trials", t["id"])
        self.webhooks.trial_ended((t["id"], t["experiment_id"], "",
                                   self.logs_path("trials", t["id"])))

    def _workspace_of(self, exp: Mapping[str, Any]) -> int | None:
        """The workspace experiment ``exp`` (its row) is filed in (a webhook's scope)."""
        project = self.store.project(int(exp.get("project_id") or 1))
        return None if project is None else int(project["workspace_id"])

    def _trial_logs(self) -> list[tuple[int, int, str, Path]]:
        """(trial id, experiment id, allocation id, log) of each running trial (the
        webhooks' TASK_LOG triggers read them)."""
        out = []
        for a in self.store.running_allocations():
            t = self.store.trial(a["trial_id"]) if a["trial_id"] is not None else None
            if t is not None:
                out.append((t["id"], t["experiment_id"], a["id"],
                            self.logs_path("trials", t["id"])))
        return out

    def _job_ended(self, j: JobRow) -> None:
        self.disk_work.submit(f"keep job {j['id']}'s files", self.scheduler.job_ended, j)

    def files_kept(self, kind: str, task_id: int) -> bool:
        """Whether an ended task's kept files are whole (they are copied after it ends)."""
        return self.scheduler.files_kept(kind, task_id)

    def wait_disk_work(self, timeout: float = 60.0) -> bool:
        """Whether the disk work submitted so far (kept files) is done within
        ``timeout`` seconds (for tests and tools)."""
        return self.disk_work.wait_idle(timeout)

    def _sweep_uploads(self) -> None:
        """Delete uploads that no recorded experiment nor live job uses (a crash between
        writing an upload and recording its experiment or job, or an older master)."""
        live = {e["archive"] for e in self.store.experiments()}  # ended: continue uses it
        live |= {j["archive"] for j in self.store.jobs() if j["state"] not in TERMINAL}
        for kind in ("experiments", "jobs"):
            folder = self.data_dir / "uploads" / kind
            if folder.is_dir():
                for p in folder.iterdir():
                    if str(p) not in live:
                        p.unlink(missing_ok=True)
        # a crash while an ended task's files were kept (or before): kept again, whole
        for t in self.store.trials():
            if t["state"] in TERMINAL and self.scheduler.workdir("trials", t["id"]).exists():
                self._trial_ended(t)
        for j in self.store.jobs():
            if j["state"] in TERMINAL and self.scheduler.workdir("jobs", j["id"]).exists():
                self._job_ended(j)

    # --- experiments ----------------------------------------------------------------------

    def create_experiment(self, raw_config: dict[str, Any], model_b64: str,
                          activate: bool = True, owner_id: int | None = None,
                          project_id: int = 1) -> int:
        """Validate everything, then store the upload and the experiment with all its
        trials: a refused request writes nothing. ``activate=False``: created PAUSED
        (Determined's ``det e create --paused``), no trial started. ``owner_id``: the
        user creating it (None: the first admin); ``project_id``: its project (issue 59;
        the caller checked it takes experiments)."""
        config = experiment_config(raw_config)
        self._probe_storage(config)
        if config.resources.slots_per_trial > self.launcher.slots:
            raise InvalidRequest(
                f"resources.slots_per_trial: {config.resources.slots_per_trial} is more than "
                f"this master has ({self.launcher.slots}{self.launcher.capacity_note()}); "
                "the trials could never run")
        archive = _decode_archive(model_b64)
        seed = config.reproducibility.experiment_seed
        if seed is None:
            seed = secrets.randbelow(2**31)
            config.reproducibility.experiment_seed = seed
        trials = planned_trials(config, seed)
        stored = config.model_dump(mode="json", exclude_none=False)
        archive_path = self._store_archive("experiments", archive)
        try:
            with self._lock:
                exp_id = self.store.create_experiment_with_trials(stored, str(archive_path),
                                                                  trials, owner_id,
                                                                  project_id)
                if not activate:  # under the lock: the scheduler never sees it active
                    self.lifecycle.experiment_event(exp_id, ExperimentEvent.PAUSE)
        except BaseException:
            archive_path.unlink(missing_ok=True)
            raise
        self._wake()
        return exp_id

    def kill_experiment(self, exp_id: int) -> None:
        self.lifecycle.experiment_event(exp_id, ExperimentEvent.KILL)
        with self._lock:
            stopping = {t["id"] for t in self.store.trials(exp_id)
                        if t["state"] == TrialState.STOPPING_CANCELED.value}
            self._kill_allocations(lambda a: a["trial_id"] in stopping)

    def _kill_allocations(self, which: Callable[[AllocationRow], bool]) -> None:
        """Stop the running processes of the allocations ``which`` picks (a kill: the
        resource manager's stop, forced after its grace); their exits end the tasks."""
        for alloc in self.store.running_allocations():
            if which(alloc):
                self.launcher.kill(alloc)

    def pause_experiment(self, exp_id: int) -> None:
        """Ask running trials to checkpoint and exit; queued ones wait. The experiment is
        STOPPING_PAUSED until none runs, then PAUSED."""
        self.lifecycle.experiment_event(exp_id, ExperimentEvent.PAUSE)

    def activate_experiment(self, exp_id: int) -> None:
        """Queue paused trials again (stopping ones once they have stopped); they continue
        from their latest checkpoint."""
        self.lifecycle.experiment_event(exp_id, ExperimentEvent.ACTIVATE)
        self._wake()

    def _probe_storage(self, config: ExperimentConfig) -> None:
        """Refuse (:class:`InvalidRequest`) a checkpoint storage the trials could not
        write to: an object store gets a small write and delete (a wrong key, a missing
        bucket, a bad endpoint); a folder is made where it is missing, as trials would."""
        from det_sdk.errors import StorageError

        try:
            self.checkpoint_store.storage(config).check()
        except StorageError as err:
            raise InvalidRequest(f"invalid experiment config:\n  {err}") from None

    def experiment_info(self, exp_id: int) -> dict[str, Any]:
        exp = self._experiment(exp_id)
        rungs = self.store.experiment_rungs(exp_id)  # one query, not one per trial
        queued = self.queued_trials()
        trials = [self._trial_out(t, rungs.get(t["id"], []), queued)
                  for t in self.store.trials(exp_id)]
        progress = sum(t["progress"] for t in trials) / len(trials) if trials else 0.0
        return {
            "id": exp["id"], "name": exp["name"], "state": exp["state"],
            "config": mask_config_secrets(exp["config"]), "created": exp["created"],
            "trials": trials,
            "progress": progress,
        }

    def replace_config(self, exp_id: int, config: ExperimentConfig) -> None:
        """Store an experiment's new active config (``det e continue``'s); call under the
        lock, before its trials are queued again. The trials read it from now on."""
        stored = config.model_dump(mode="json", exclude_none=False)
        self.store.set_experiment_config(exp_id, stored)
        self._configs.pop(exp_id, None)

    def _experiment(self, exp_id: int) -> ExperimentRow:
        exp = self.store.experiment(exp_id)
        if exp is None:
            raise NotFound(f"no experiment {exp_id}")
        return exp

    # --- trials ---------------------------------------------------------------------------

    def trial(self, trial_id: int) -> TrialRow:
        t = self.store.trial(trial_id)
        if t is None:
            raise NotFound(f"no trial {trial_id}")
        return t

    def trial_info(self, trial_id: int) -> dict[str, Any]:
        t = self.trial(trial_id)
        return {**self._trial_out(t), "stages": self.trial_stages(t)}

    def trial_stages(self, t: TrialRow) -> list[dict[str, Any]]:
        """The stages of a trial's script (det_sdk.stages), in the order they started:
        from its metric series and checkpoint records."""
        metric, smaller = self.trial_config(t["id"]).searcher_metric
        stages: dict[str, dict[str, Any]] = {}
        firsts: dict[str, float] = {}
        for g in self.store.metric_stages(t["id"], metric):
            group, name = split_group(g["grp"])
            s = stages.setdefault(name, {"name": name, "steps_completed": 0, "epoch": 0,
                                         "best_metric": None, "latest_checkpoint": None,
                                         "searched": False})
            firsts[name] = min(firsts.get(name, g["first"]), g["first"])
            s["steps_completed"] = max(s["steps_completed"], g["steps"])
            s["epoch"] = max(s["epoch"], g["epoch"])
            if group == "validation":
                s["best_metric"] = g["least"] if smaller else g["greatest"]
        for c in self.store.checkpoints(t["id"]):  # in steps order: the latest by time
            name = c["stage"] or DEFAULT_STAGE
            s = stages.setdefault(name, {"name": name, "steps_completed": c["steps"],
                                         "epoch": c["epoch"], "best_metric": None,
                                         "latest_checkpoint": None, "searched": False})
            firsts[name] = min(firsts.get(name, c["created"]), c["created"])
            latest = s.get("_created", -1.0)
            if c["created"] >= latest and not c.get("damaged"):  # never resumed from
                s["latest_checkpoint"], s["_created"] = c["uuid"], c["created"]
            s["searched"] = s["searched"] or c["searched"] is None or bool(c["searched"])
        ordered = sorted(stages.values(), key=lambda s: firsts[s["name"]])
        for i, s in enumerate(ordered):
            s.pop("_created", None)
            s["state"] = TrialState.COMPLETED.value if i < len(ordered) - 1 else t["state"]
        if len(ordered) == 1 and not ordered[0]["searched"] and ordered[0]["name"] == \
                DEFAULT_STAGE:
            ordered[0]["searched"] = True  # a single-fit trial with no checkpoint yet
        return ordered

    def queued_trials(self) -> dict[int, str]:
        """Trials handed to the resource manager that still wait in its queue (a Slurm job
        PENDING), with its reason: they show as QUEUED, though the lifecycle has them
        RUNNING (pause and kill reach them through the resource manager)."""
        launching, why = self.launcher.launching_trial, self.launcher.launching_reason
        queued = {a["trial_id"]: a["queue_reason"] for a in self.store.running_allocations()
                  if a["queue_reason"] and a["trial_id"] is not None}
        if launching is not None and why is not None:
            # its state is RUNNING already, its allocation (with Slurm's reason) not yet
            queued.setdefault(launching, why)
        return queued

    def _trial_out(self, t: TrialRow, rungs: list[dict[str, Any]] | None = None,
                   queued: dict[int, str] | None = None) -> dict[str, Any]:
        keys = ("id", "experiment_id", "state", "hparams", "seed", "restarts",
                "steps_completed", "epoch", "progress", "best_metric", "latest_checkpoint",
                "last_error", "bracket", "checkpoint_note", "keras_backend")
        row: dict[str, Any] = dict(t)
        info = {k: row.get(k) for k in keys}
        reason = (self.queued_trials() if queued is None else queued).get(t["id"])
        if reason and t["state"] == TrialState.RUNNING.value:
            info["state"], info["queue_reason"] = TrialState.QUEUED.value, reason
        op = self.search.operation(t["id"], t)
        info["searcher_length"] = op and {"unit": op["unit"], "length": op["length"]}
        info["rungs"] = self.store.trial_rungs(t["id"]) if rungs is None else rungs
        return info

    def trial_config(self, trial_id: int) -> ExperimentConfig:
        """The experiment config of a trial (parsed once per experiment: configs never
        change, and an experiment may have 10,000 trials)."""
        exp_id = self._experiment_of.get(trial_id)
        if exp_id is None:
            exp_id = self._experiment_of[trial_id] = self.trial(trial_id)["experiment_id"]
        cfg = self._configs.get(exp_id)
        if cfg is None:
            cfg = ExperimentConfig.model_validate(self._experiment(exp_id)["config"])
            self._configs[exp_id] = cfg
        return cfg

    def report_metrics(self, trial_id: int, group: str, steps: int, epoch: int,
                       metrics: dict[str, float], stage: str | None = None,
                       searched: bool = True) -> None:
        """Store a report (the hot path: the state check is part of the one UPDATE).

        A stage's report (det_sdk.stages) goes to its own series; only the searched
        stage's advance the trial's progress and best metric."""
        metric, smaller = self.trial_config(trial_id).searcher_metric
        searcher_value = metrics.get(metric) if group == "validation" and searched else None
        if not self.store.record_metrics(trial_id, stored_group(group, stage), steps, epoch,
                                         metrics, searcher_value, smaller,
                                         states=REPORTING_STATES, advance=searched):
            # refused: say why, in the lifecycle's words (no such trial, or it has ended)
            next_trial_state(self.trial(trial_id)["state"], TrialEvent.REPORTED, trial_id)
            raise Conflict(f"trial {trial_id} changed state during the report; send it again")
        if group == "validation" and searched and \
                self.search.report_time(trial_id, steps, epoch, metrics):
            self._preemption_changed()  # time_metric ASHA stopped it: wake its poll

    def report_progress(self, trial_id: int, progress: float) -> None:
        with self._lock:
            self.lifecycle.trial_event(trial_id, TrialEvent.REPORTED, progress=progress)

    # --- searcher operations ----------------------------------------------------------------

    def searcher_operation(self, trial_id: int) -> dict[str, Any] | None:
        """What the trial trains to now: ``{unit, length, completed}``; None: its own choice."""
        return self.search.operation(trial_id)

    def complete_operation(self, trial_id: int, unit: str, length: int,
                           metric: float) -> dict[str, Any] | None:
        """The trial trained to ``length`` and validated: the searcher's next operation."""
        return self.search.complete(trial_id, unit, length, metric)

    # --- checkpoints ----------------------------------------------------------------------

    def report_checkpoint(self, report: dict[str, Any]) -> None:
        self.checkpoint_store.report(report)

    def checkpoint_dir(self, config: ExperimentConfig) -> Path:
        return self.checkpoint_store.directory(config)

    def checkpoint_info(self, uuid: str) -> dict[str, Any]:
        return self.checkpoint_store.info(uuid)

    def checkpoint_stored(self, uuid: str) -> bool:
        """Whether checkpoint ``uuid``'s files are in its storage (whichever store)."""
        return self.checkpoint_store.stored(uuid)

    def checkpoints(self, trial_id: int | None = None) -> list[dict[str, Any]]:
        return self.checkpoint_store.list(trial_id)

    def trial_checkpoint(self, trial_id: int, best: bool,
                         stage: str | None = None) -> dict[str, Any]:
        return self.checkpoint_store.of_trial(trial_id, best, stage)

    # --- TensorBoard ----------------------------------------------------------------------

    def tensorboard_sources(self, experiment_ids: list[int],
                            trial_ids: list[int]) -> list[Source]:
        """Each trial's TensorBoard directory: every trial of ``experiment_ids``, then
        ``trial_ids`` (once each). NotFound names an unknown experiment or trial; an
        experiment without trials is refused."""
        if not experiment_ids and not trial_ids:
            raise InvalidRequest("experiment_ids, trial_ids: give at least one")
        trials: dict[int, TrialRow] = {}
        for exp_id in experiment_ids:
            self._experiment(exp_id)
            rows = self.store.trials(exp_id)
            if not rows:
                raise InvalidRequest(f"experiment_ids: experiment {exp_id} has no trials yet")
            trials.update((t["id"], t) for t in rows)
        for trial_id in trial_ids:
            trials.setdefault(trial_id, self.trial(trial_id))
        return [Source(t["experiment_id"], t["id"], str(tensorboard_dir(
            self.checkpoint_dir(self.trial_config(t["id"])), t["experiment_id"], t["id"])))
                for t in trials.values()]

    def start_tensorboard(self, experiment_ids: list[int], trial_ids: list[int],
                          description: str | None = None,
                          owner_id: int | None = None) -> dict[str, Any]:
        """A TensorBoard over those trials (``det tensorboard start``), STARTING;
        ``owner_id``: the user starting it."""
        sources = self.tensorboard_sources(experiment_ids, trial_ids)
        return self.tensorboards.start(sources, experiment_ids, trial_ids, description,
                                       owner_id)

    def logs_path(self, kind: str, task_id: int) -> Path:
        return self.scheduler.logs_path(kind, task_id)

    def files_path(self, kind: str, task_id: int) -> Path:
        return self.scheduler.files_path(kind, task_id)

    # --- jobs -----------------------------------------------------------------------------

    def create_job(self, raw_config: dict[str, Any], model_b64: str,
                   owner_id: int | None = None) -> int:
        try:
            config = parse_job_config(raw_config)
        except (ValueError, RecursionError) as err:
            raise InvalidRequest(str(err)) from None
        if config.resources.slots > self.launcher.slots:
            raise InvalidRequest(
                f"resources.slots: {config.resources.slots} is more than this master has "
                f"({self.launcher.slots}{self.launcher.capacity_note()})"
            )
        archive = _decode_archive(model_b64)
        archive_path = self._store_archive("jobs", archive)
        try:
            job_id = self.store.create_job(config.model_dump(mode="json"), str(archive_path),
                                           owner_id)
        except BaseException:
            archive_path.unlink(missing_ok=True)
            raise
        self._wake()
        return job_id

    def job(self, job_id: int) -> JobRow:
        j = self.store.job(job_id)
        if j is None:
            raise NotFound(f"no job {job_id}")
        return j

    def kill_job(self, job_id: int) -> str:
        """Stop the job's process (as an experiment's trials are killed): CANCELED once
        it has exited (at once when none runs)."""
        state = self.lifecycle.job_event(job_id, JobEvent.KILL)
        if state is JobState.STOPPING_CANCELED:
            with self._lock:
                self._kill_allocations(lambda a: a["job_id"] == job_id)
        return self.job(job_id)["state"]

    def pause_job(self, job_id: int) -> str:
        """Ask the job's process to stop at its next progress checkpoint (the preemption
        long-poll answers true, as for a trial): STOPPING_PAUSED, then PAUSED."""
        self.lifecycle.job_event(job_id, JobEvent.PAUSE)
        return self.job(job_id)["state"]

    def activate_job(self, job_id: int) -> str:
        """Queue a paused job again: its process resumes from its progress."""
        self.lifecycle.job_event(job_id, JobEvent.ACTIVATE)
        self._wake()
        return self.job(job_id)["state"]

    def job_info(self, job_id: int) -> dict[str, Any]:
        """The job with its progress (rows, rows per second, time left: job_progress) and
        each metric group's latest report (``latest_metrics``)."""
        j = self.job(job_id)
        keys = ("id", "name", "state", "config", "created", "exit_code", "ended", "restarts")
        row: dict[str, Any] = dict(j)
        owner = self.store.owner_or_first(row.get("owner_id"))
        return {**{k: row[k] for k in keys}, "output": self._job_output(j),
                "user_id": owner, "username": self.store.user_names().get(owner, ""),
                **job_progress(j["state"], j["rows_done"], j["rows_total"], j["rate_rows"],
                               j["rate_at"], j["progress_at"]),
                "latest_metrics": self.job_records.latest_metrics(job_id)}

    def _job_output(self, j: JobRow) -> str | None:
        """Where the job's output is: as reported, or, once the job has ended, where the
        master keeps what it wrote into its working directory (which is gone)."""
        output = j["output"]
        workdir = self.tasks_dir / "jobs" / str(j["id"]) / "workdir"
        if output and j["state"] in TERMINAL and Path(output).is_relative_to(workdir):
            return str(self.files_path("jobs", j["id"]) / Path(output).relative_to(workdir))
        return output

    def _job_allocation(self, alloc_id: str) -> int:
        """The job whose allocation ``alloc_id`` is; NotFound if none."""
        alloc = self.store.allocation(alloc_id)
        if alloc is None or alloc["job_id"] is None:
            raise NotFound(f"no job allocation {alloc_id!r}")
        return alloc["job_id"]

    def report_job_progress(self, alloc_id: str, rows_done: int, rows_total: int | None,
                            output: str | None) -> None:
        """The chief of a job's allocation says how far it is (kept: the latest, and a
        bounded history for the throughput chart: job_records)."""
        job_id = self._job_allocation(alloc_id)
        if not self.job_records.record_progress(job_id, alloc_id, rows_done, rows_total,
                                                output, _JOB_REPORTING):
            raise Conflict(f"job {job_id} is {self.job(job_id)['state']}: "
                           "its progress is no longer recorded")

    def report_job_metrics(self, alloc_id: str, group: str, steps: int, epoch: int,
                           metrics: dict[str, float], stage: str | None = None) -> None:
        """A job's chief reports metrics (``report_metrics`` in a job): kept per job, one
        report per (group, step), as a trial's; a stage's (det_sdk.stages) in its own
        series."""
        job_id = self._job_allocation(alloc_id)
        if not self.job_records.record_metrics(job_id, stored_group(group, stage), steps,
                                               epoch, metrics, _JOB_REPORTING):
            raise Conflict(f"job {job_id} is {self.job(job_id)['state']}: "
                           "its metrics are no longer recorded")

    def job_throughput(self, job_id: int) -> dict[str, list[float]]:
        """Rows per second over time, from the job's kept progress reports (job_records)."""
        self.job(job_id)
        return throughput(self.job_records.progress_points(job_id))

    # --- preemption -----------------------------------------------------------------------

    def should_preempt(self, alloc_id: str) -> bool:
        alloc = self.store.allocation(alloc_id)
        if alloc is None:
            raise NotFound(f"no allocation {alloc_id!r}")
        if alloc["preempt"] or alloc["state"] != "RUNNING":
            return True  # asked to stop, or the master has ended the allocation
        if alloc["trial_id"] is not None:
            t = self.store.trial(alloc["trial_id"])
            return bool(t and (t["state"] in _STOPPING
                               or self.search.wants_stop(t["id"], t)))
        if alloc["job_id"] is not None:
            j = self.store.job(alloc["job_id"])
            return bool(j and j["state"] in _STOPPING)
        return False

    def acknowledge_preemption(self, alloc_id: str) -> None:
        """The task stops because it was asked to: its exit with 0 is a stop (it resumes
        on activate), whatever the searcher had recorded (a fit after the searched one)."""
        if self.store.allocation(alloc_id) is None:
            raise NotFound(f"no allocation {alloc_id!r}")
        with self.lifecycle.lock:
            self.store.update_allocation(alloc_id, preempt_acked=1)

    # --- what the HTTP layer asks (det_sdk.master.routes): reads by name, so no route -------
    # --- reaches into the store ----------------------------------------------------------

    def is_user_token(self, token: str) -> bool:
        """Whether ``token`` is an active user's token (``det master up``'s, or a
        sign-in's)."""
        return self.store.is_user_token(token)

    def token_user(self, token: str) -> dict[str, Any] | None:
        """The active user ``token`` signs in (det_sdk.master.store.users); None: none."""
        return self.store.token_user(hash_token(token))

    def allocation_by_token(self, token: str) -> AllocationRow | None:
        """The allocation whose task holds ``token``, with its state; None: no task's."""
        return self.store.allocation_by_token(token)

    def experiment_state(self, exp_id: int) -> str:
        """The experiment's state now (NotFound if there is no such experiment)."""
        return self._experiment(exp_id)["state"]

    def alert(self, exp_id: int, trial_id: int | None, title: Any, description: Any,
              level: Any) -> int:
        """A script's custom alert (``core_context.alert``) to the webhooks its
        experiment names (det_sdk.master.webhooks); how many it was queued to."""
        exp = self._experiment(exp_id)
        if trial_id and self.trial(trial_id)["experiment_id"] != exp_id:
            raise InvalidRequest(f"trial_id: trial {trial_id} is not of experiment {exp_id}")
        return self.webhooks.custom(exp, trial_id or None, title, description, level)

    # --- storage of uploads -----------------------------------------------------------------

    def _store_archive(self, kind: str, data: bytes) -> Path:
        """Write an upload under a temporary name, then rename: no half archives."""
        folder = self.data_dir / "uploads" / kind
        folder.mkdir(parents=True, exist_ok=True)
        final = folder / f"{secrets.token_hex(8)}.tar.gz"
        try:
            write_atomic(final, data)
        except OSError as err:
            if err.errno == errno.ENOSPC:
                raise NoSpace(f"the master's disk is full: cannot store the {len(data)}-byte "
                              f"upload in {folder}") from None
            raise
        return final


def experiment_config(raw: dict[str, Any]) -> ExperimentConfig:
    """A submitted config, parsed and checked as a create checks it (InvalidRequest)."""
    try:
        config = parse_experiment_config(raw)
        config.checkpoint_storage.check_absolute()  # never under a trial's workdir
    except (ValueError, RecursionError) as err:
        raise InvalidRequest(str(err)) from None
    if not config.entrypoint_script:
        raise InvalidRequest("invalid experiment config:\n  entrypoint_script: required field "
                             "is missing (the command that starts a trial, e.g. python3 "
                             "train.py)")
    return config


def _decode_archive(model_b64: str) -> bytes:
    # the archive's own error alone, as create has always answered it
    return decode_archive(model_b64, "model_definition", prefix_errors=False)

