"""The master's behaviour, apart from HTTP: experiments, trials, jobs and their lifecycles.

``app.py`` turns requests into calls here; ``launcher.py`` runs processes. A
background loop starts queued tasks whenever slots are free.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from det_sdk.config import (
    ExperimentConfig,
    Length,
    parse_experiment_config,
    parse_job_config,
)
from det_sdk.master.archive import check_archive
from det_sdk.master.launcher import Launcher, task_env
from det_sdk.master.searchers import brackets, initial_trials, promotes, rung_lengths
from det_sdk.master.store import ACTIVE_TRIAL_STATES, Store
from det_sdk.storage import best_first, fsync_path

__all__ = ["Master", "RequestError"]

TERMINAL = ("COMPLETED", "CANCELED", "ERROR")
LOG_TAIL_LINES = 20


class RequestError(ValueError):
    """A request the master refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class Master:
    """State and behaviour of one master, backed by ``data_dir``."""

    def __init__(self, data_dir: Path, slots: int, url: str) -> None:
        self.data_dir = data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        self.store = Store(data_dir / "master.db")
        self.url = url
        self.launcher = Launcher(self.store, data_dir, slots, url, self._on_exit)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.RLock()
        self._configs: dict[int, ExperimentConfig] = {}
        # called (from any thread) when trials are asked to stop: wakes the long-polls
        self.preemption_listeners: list[Callable[[], None]] = []

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Adopt tasks that outlived the previous master, then schedule in the background."""
        for alloc in self.store.running_allocations():
            self.launcher.adopt(alloc)
        threading.Thread(target=self._schedule_loop, daemon=True, name="scheduler").start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def user_token(self) -> str:
        """A new user token (``det master up`` stores it for the CLI)."""
        token = secrets.token_urlsafe(32)
        self.store.add_user_token(token)
        return token

    # --- experiments ----------------------------------------------------------------------

    def create_experiment(self, raw_config: dict[str, Any], model_b64: str) -> int:
        config = _experiment_config(raw_config)
        archive = _decode_archive(model_b64)
        seed = config.reproducibility.experiment_seed
        if seed is None:
            seed = secrets.randbelow(2**31)
            config.reproducibility.experiment_seed = seed
        try:
            trial_hparams = initial_trials(config, seed)
        except ValueError as err:
            raise RequestError(f"invalid experiment config: {err}") from None
        stored = config.model_dump(mode="json", exclude_none=False)
        # Every trial the search will run is created now, with its bracket and first
        # length: the search survives a master restart without creating any twice.
        trials = [
            {"hparams": hp, "seed": (seed + i) % 2**31, "bracket": b,
             "target": (rung_lengths(config, b) or [None])[0]}
            for i, (hp, b) in enumerate(zip(trial_hparams,
                                            brackets(config, len(trial_hparams))))
        ]
        archive_path = self._store_archive("experiments", archive)
        with self._lock:
            exp_id = self.store.create_experiment_with_trials(stored, str(archive_path), trials)
        self._wake.set()
        return exp_id

    def kill_experiment(self, exp_id: int) -> None:
        exp = self._experiment(exp_id)
        if exp["state"] in TERMINAL:
            return
        with self._lock:
            for t in self.store.trials(exp_id):
                if t["state"] == "QUEUED" or t["state"] == "PAUSED":
                    self.store.update_trial(t["id"], state="CANCELED")
                elif t["state"] in ("RUNNING", "STOPPING_PAUSED"):
                    self.store.update_trial(t["id"], state="STOPPING_CANCELED")
                    for alloc in self._allocations_of_trial(t["id"]):
                        self.launcher.kill(alloc)
            self._update_experiment_state(exp_id)
        self._preemption_changed()

    def pause_experiment(self, exp_id: int) -> None:
        """Ask running trials to checkpoint and exit (PAUSED); queued ones wait."""
        exp = self._experiment(exp_id)
        if exp["state"] != "ACTIVE":
            raise RequestError(f"experiment {exp_id} is {exp['state']}, not ACTIVE", status=409)
        with self._lock:
            self.store.set_experiment_state(exp_id, "PAUSED")
            for t in self.store.trials(exp_id):
                if t["state"] == "QUEUED":
                    self.store.update_trial(t["id"], state="PAUSED")
                elif t["state"] == "RUNNING":
                    # the trial's preemption long-poll sees this state and stops
                    self.store.update_trial(t["id"], state="STOPPING_PAUSED")
        self._preemption_changed()

    def _preemption_changed(self) -> None:
        for listener in self.preemption_listeners:
            listener()

    def activate_experiment(self, exp_id: int) -> None:
        """Queue paused trials again; they continue from their latest checkpoint."""
        exp = self._experiment(exp_id)
        if exp["state"] not in ("PAUSED", "ACTIVE"):
            raise RequestError(f"experiment {exp_id} is {exp['state']}; it cannot run again",
                               status=409)
        with self._lock:
            self.store.set_experiment_state(exp_id, "ACTIVE")
            for t in self.store.trials(exp_id):
                if t["state"] == "PAUSED":
                    self.store.update_trial(t["id"], state="QUEUED")
        self._wake.set()

    def experiment_info(self, exp_id: int) -> dict[str, Any]:
        exp = self._experiment(exp_id)
        trials = [self._trial_out(t) for t in self.store.trials(exp_id)]
        progress = sum(t["progress"] for t in trials) / len(trials) if trials else 0.0
        return {
            "id": exp["id"], "name": exp["name"], "state": exp["state"],
            "config": exp["config"], "created": exp["created"], "trials": trials,
            "progress": progress,
        }

    def _experiment(self, exp_id: int) -> dict[str, Any]:
        exp = self.store.experiment(exp_id)
        if exp is None:
            raise RequestError(f"no experiment {exp_id}", status=404)
        return exp

    def _update_experiment_state(self, exp_id: int) -> None:
        states = [t["state"] for t in self.store.trials(exp_id)]
        exp = self.store.experiment(exp_id)
        if not states or exp is None or any(s not in TERMINAL for s in states):
            return
        if all(s == "CANCELED" for s in states):
            new = "CANCELED"
        elif "COMPLETED" in states:
            new = "COMPLETED"
        else:
            new = "ERROR"
        self.store.set_experiment_state(exp_id, new)

    # --- trials ---------------------------------------------------------------------------

    def trial(self, trial_id: int) -> dict[str, Any]:
        t = self.store.trial(trial_id)
        if t is None:
            raise RequestError(f"no trial {trial_id}", status=404)
        return t

    def trial_info(self, trial_id: int) -> dict[str, Any]:
        return self._trial_out(self.trial(trial_id))

    def _trial_out(self, t: dict[str, Any]) -> dict[str, Any]:
        keys = ("id", "experiment_id", "state", "hparams", "seed", "restarts",
                "steps_completed", "epoch", "progress", "best_metric", "latest_checkpoint",
                "last_error", "bracket")
        info = {k: t[k] for k in keys}
        op = self._operation(t)
        info["searcher_length"] = op and {"unit": op["unit"], "length": op["length"]}
        info["rungs"] = self.store.trial_rungs(t["id"])
        return info

    def trial_config(self, trial_id: int) -> ExperimentConfig:
        """The experiment config of a trial (parsed once: configs never change)."""
        cfg = self._configs.get(trial_id)
        if cfg is None:
            t = self.trial(trial_id)
            cfg = ExperimentConfig.model_validate(self._experiment(t["experiment_id"])["config"])
            self._configs[trial_id] = cfg
        return cfg

    def report_metrics(self, trial_id: int, group: str, steps: int, epoch: int,
                       metrics: dict[str, float]) -> None:
        metric, smaller = self.trial_config(trial_id).searcher_metric
        searcher_value = metrics.get(metric) if group == "validation" else None
        if not self.store.record_metrics(trial_id, group, steps, epoch, metrics,
                                         searcher_value, smaller):
            raise RequestError(f"no trial {trial_id}", status=404)

    # --- searcher operations ----------------------------------------------------------------

    def searcher_operation(self, trial_id: int) -> dict[str, Any] | None:
        """What the trial trains to now: ``{unit, length, completed}``; None: its own choice."""
        return self._operation(self.trial(trial_id))

    def _operation(self, t: dict[str, Any]) -> dict[str, Any] | None:
        length = self._max_length(t["id"])
        if length is None:
            return None
        return {"unit": length.unit, "length": _target(t, length),
                "completed": bool(t["searcher_done"])}

    def complete_operation(self, trial_id: int, unit: str, length: int,
                           metric: float) -> dict[str, Any] | None:
        """The trial trained to ``length`` and validated: decide, and answer its next operation.

        Idempotent: a report repeated after a retry gets the decision made the first time.
        """
        cfg = self.trial_config(trial_id)
        max_length = self._max_length(trial_id)
        if max_length is None:
            return None
        if unit != max_length.unit:
            raise RequestError(f"unit: the searcher counts in {max_length.unit}, not {unit}")
        with self._lock:
            t = self.trial(trial_id)
            ladder = rung_lengths(cfg, t["bracket"])
            target = _target(t, max_length)
            if t["searcher_done"] or length < target:
                return self._operation(t)  # a repeat, or not there yet
            if target not in ladder[:-1]:  # the last rung (or the only length): done
                self.store.update_trial(trial_id, searcher_done=1)
                return self.searcher_operation(trial_id)
            rung = ladder.index(target)
            if self.store.rung_result(trial_id, rung) is None:
                results = [(r["trial_id"], r["metric"]) for r in
                           self.store.rung_results(t["experiment_id"], t["bracket"], rung)]
                results.append((trial_id, metric))
                go_on = promotes(results, trial_id, cfg.searcher.divisor,  # type: ignore[union-attr]
                                 cfg.searcher.smaller_is_better)  # type: ignore[union-attr]
                self.store.record_rung(trial_id, rung, metric, go_on, ladder[rung + 1])
        return self.searcher_operation(trial_id)

    def _max_length(self, trial_id: int) -> Length | None:
        cfg = self.trial_config(trial_id)
        return cfg.searcher.max_length if cfg.searcher else None

    def report_progress(self, trial_id: int, progress: float) -> None:
        self.trial(trial_id)
        self.store.update_trial(trial_id, progress=progress)

    def report_checkpoint(self, report: dict[str, Any]) -> None:
        self.trial(report["trial_id"])
        with self._lock:
            self.store.put_checkpoint(report)
            self.store.update_trial(report["trial_id"], latest_checkpoint=report["uuid"])
            self._apply_retention(report["trial_id"])

    def _apply_retention(self, trial_id: int) -> None:
        """Delete the trial's checkpoints (files, then records) the policy no longer keeps.

        Kept: the ``save_trial_latest`` newest (never fewer than one: a paused or
        restarting trial resumes from it), the ``save_trial_best`` best by the
        searcher metric, and any among the experiment's ``save_experiment_best``.
        """
        cfg = self.trial_config(trial_id)
        policy = cfg.checkpoint_storage
        metric, smaller = cfg.searcher_metric
        rows = self.store.checkpoints(trial_id)
        keep = {r["uuid"] for r in rows[-max(1, policy.save_trial_latest):]}
        keep |= {r["uuid"] for r in best_first(rows, metric, smaller)[:policy.save_trial_best]}
        if policy.save_experiment_best:
            exp_id = self.trial(trial_id)["experiment_id"]
            everyone = [c for t in self.store.trials(exp_id)
                        for c in self.store.checkpoints(t["id"])]
            ranked = best_first(everyone, metric, smaller)
            keep |= {r["uuid"] for r in ranked[:policy.save_experiment_best]}
        base = self.checkpoint_dir(cfg)
        for r in rows:
            if r["uuid"] not in keep:
                shutil.rmtree(base / r["uuid"], ignore_errors=True)
                self.store.delete_checkpoint(r["uuid"])

    def checkpoint_dir(self, config: ExperimentConfig) -> Path:
        host_path = config.checkpoint_storage.host_path
        return Path(host_path) if host_path else self.data_dir / "checkpoints"

    def checkpoint_info(self, uuid: str) -> dict[str, Any]:
        c = self.store.checkpoint(uuid)
        if c is None:
            raise RequestError(f"no checkpoint {uuid!r}", status=404)
        return self._checkpoint_out(c)

    def checkpoints(self, trial_id: int | None = None) -> list[dict[str, Any]]:
        return [self._checkpoint_out(c) for c in self.store.checkpoints(trial_id)]

    def _checkpoint_out(self, c: dict[str, Any]) -> dict[str, Any]:
        t = self.store.trial(c["trial_id"])
        path = None
        if t is not None:
            path = str(self.checkpoint_dir(self.trial_config(t["id"])) / c["uuid"])
        return {
            "uuid": c["uuid"], "trial_id": c["trial_id"],
            "experiment_id": t["experiment_id"] if t else None,
            "steps_completed": c["steps"], "epoch": c["epoch"], "batch": c["batch"],
            "size": c["size"], "metrics": c["metrics"], "created": c["created"], "path": path,
        }

    def trial_checkpoint(self, trial_id: int, best: bool) -> dict[str, Any]:
        rows = self.checkpoints(trial_id)
        if not rows:
            raise RequestError(f"trial {trial_id} has no checkpoint", status=404)
        if not best:
            return rows[-1]
        metric, smaller = self.trial_config(trial_id).searcher_metric
        ranked = best_first(rows, metric, smaller)
        if not ranked:
            raise RequestError(f"no checkpoint of trial {trial_id} has {metric!r}", status=404)
        return ranked[0]

    def logs_path(self, kind: str, task_id: int) -> Path:
        return self.data_dir / kind / str(task_id) / "logs.txt"

    # --- jobs -----------------------------------------------------------------------------

    def create_job(self, raw_config: dict[str, Any], model_b64: str) -> int:
        try:
            config = parse_job_config(raw_config)
        except ValueError as err:
            raise RequestError(str(err)) from None
        archive = _decode_archive(model_b64)
        if config.resources.slots > self.launcher.slots:
            raise RequestError(
                f"resources.slots: {config.resources.slots} is more than this master has "
                f"({self.launcher.slots})"
            )
        archive_path = self._store_archive("jobs", archive)
        job_id = self.store.create_job(config.model_dump(mode="json"), str(archive_path))
        self._wake.set()
        return job_id

    def job(self, job_id: int) -> dict[str, Any]:
        j = self.store.job(job_id)
        if j is None:
            raise RequestError(f"no job {job_id}", status=404)
        return j

    # --- scheduling -------------------------------------------------------------------------

    def _schedule_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.schedule()
            except Exception as err:  # the loop must outlive one bad task
                print(f"master: scheduling failed: {err!r}", flush=True)
            self._wake.wait(1.0)
            self._wake.clear()

    def schedule(self) -> None:
        """Start queued trials and jobs, oldest first, while slots are free."""
        with self._lock:
            for j in self.store.jobs():
                if j["state"] == "QUEUED":
                    slots = j["config"]["resources"]["slots"]
                    if slots <= self.launcher.free_slots():
                        self._launch_job(j)
            trials = self.store.trials()
            running: dict[int, int] = {}
            for t in trials:
                if t["state"] in ACTIVE_TRIAL_STATES and t["state"] != "QUEUED":
                    running[t["experiment_id"]] = running.get(t["experiment_id"], 0) + 1
            for t in trials:
                if t["state"] != "QUEUED":
                    continue
                exp = self.store.experiment(t["experiment_id"])
                if exp is None or exp["state"] != "ACTIVE":
                    continue
                cfg = self.trial_config(t["id"])
                limit = cfg.searcher.max_concurrent_trials if cfg.searcher else 0
                if limit and running.get(exp["id"], 0) >= limit:
                    continue
                if cfg.resources.slots_per_trial > self.launcher.free_slots():
                    break  # first come, first served: do not starve big trials
                self._launch_trial(t, exp, cfg)
                running[exp["id"]] = running.get(exp["id"], 0) + 1

    def _launch_trial(self, t: dict[str, Any], exp: dict[str, Any],
                      cfg: ExperimentConfig) -> None:
        config = dict(exp["config"])
        config["checkpoint_storage"] = {
            **config["checkpoint_storage"], "host_path": str(self.checkpoint_dir(cfg)),
        }
        env = task_env({
            "DET_EXPERIMENT_ID": str(exp["id"]), "DET_TRIAL_ID": str(t["id"]),
            "DET_TRIAL_SEED": str(t["seed"]), "DET_HPARAMS": t["hparams"],
            "DET_LATEST_CHECKPOINT": t["latest_checkpoint"], "DET_EXPERIMENT_CONFIG": config,
        })
        self.store.update_trial(t["id"], state="RUNNING")
        self.launcher.launch(
            task_type="TRIAL", task_id=t["id"], archive=exp["archive"],
            workdir=self.data_dir / "trials" / str(t["id"]) / "workdir",
            entrypoint=cfg.entrypoint_script or "", slots=cfg.resources.slots_per_trial,
            env=env, log_path=self.logs_path("trials", t["id"]),
        )

    def _launch_job(self, j: dict[str, Any]) -> None:
        config = j["config"]
        env = task_env({"DET_EXPERIMENT_CONFIG": config})
        self.store.update_job(j["id"], state="RUNNING")
        self.launcher.launch(
            task_type="GENERIC", task_id=j["id"], archive=j["archive"],
            workdir=self.data_dir / "jobs" / str(j["id"]) / "workdir",
            entrypoint=config["entrypoint_script"], slots=config["resources"]["slots"],
            env=env, log_path=self.logs_path("jobs", j["id"]),
        )

    def _allocations_of_trial(self, trial_id: int) -> list[dict[str, Any]]:
        return [a for a in self.store.running_allocations() if a["trial_id"] == trial_id]

    def _on_exit(self, alloc: dict[str, Any], code: int) -> None:
        with self._lock:
            if alloc["task_type"] == "GENERIC":
                job = self.store.job(alloc["job_id"])
                if job and job["state"] == "RUNNING":
                    self.store.update_job(job["id"], state="COMPLETED" if code == 0 else "ERROR",
                                          exit_code=code)
            else:
                self._trial_exited(alloc["trial_id"], code)
        self._wake.set()

    def _trial_exited(self, trial_id: int, code: int) -> None:
        t = self.store.trial(trial_id)
        if t is None:
            return
        cfg = self.trial_config(trial_id)
        if t["state"] == "STOPPING_CANCELED":
            self.store.update_trial(trial_id, state="CANCELED")
        elif t["state"] == "STOPPING_PAUSED":
            self.store.update_trial(trial_id, state="PAUSED")
        elif code == 0:
            self.store.update_trial(trial_id, state="COMPLETED", progress=1.0)
        elif t["restarts"] < cfg.max_restarts:
            self.store.update_trial(trial_id, state="QUEUED", restarts=t["restarts"] + 1)
        else:
            tail = _tail(self.logs_path("trials", trial_id), LOG_TAIL_LINES)
            self.store.update_trial(
                trial_id, state="ERROR",
                last_error=f"exited with code {code} after {t['restarts']} restarts:\n{tail}",
            )
        self._update_experiment_state(t["experiment_id"])

    # --- preemption -----------------------------------------------------------------------

    def should_preempt(self, alloc_id: str) -> bool:
        alloc = self.store.allocation(alloc_id)
        if alloc is None:
            raise RequestError(f"no allocation {alloc_id!r}", status=404)
        if alloc["preempt"]:
            return True
        if alloc["trial_id"] is not None:
            t = self.store.trial(alloc["trial_id"])
            return bool(t and t["state"] in ("STOPPING_PAUSED", "STOPPING_CANCELED"))
        return False

    # --- storage of uploads -----------------------------------------------------------------

    def _store_archive(self, kind: str, data: bytes) -> Path:
        """Write an upload under a temporary name, then rename: no half archives."""
        folder = self.data_dir / "uploads" / kind
        folder.mkdir(parents=True, exist_ok=True)
        final = folder / f"{secrets.token_hex(8)}.tar.gz"
        tmp = folder / f".{final.name}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
        fsync_path(folder)
        return final


def _target(t: dict[str, Any], max_length: Length) -> int:
    """The length a trial trains to now: its rung (ASHA), else the searcher's max_length."""
    return t["target"] if t["target"] is not None else max_length.value


def _experiment_config(raw: dict[str, Any]) -> ExperimentConfig:
    try:
        config = parse_experiment_config(raw)
    except ValueError as err:
        raise RequestError(str(err)) from None
    if not config.entrypoint_script:
        raise RequestError("invalid experiment config:\n  entrypoint_script: required field "
                           "is missing (the command that starts a trial, e.g. python3 train.py)")
    return config


def _decode_archive(model_b64: str) -> bytes:
    try:
        data = base64.b64decode(model_b64, validate=True)
    except (binascii.Error, ValueError):
        raise RequestError("model_definition is not valid base64") from None
    try:
        check_archive(data)
    except ValueError as err:
        raise RequestError(str(err)) from None
    return data


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])

