"""What the web UI's pages show, as JSON-ready dicts: a thin layer over the master.

Reads go to the store's queries (``det_sdk.master.store``) and to ``Master``'s public
methods (``experiment_info``, ``trial_info``, ``checkpoints``, ``trial_config``,
``checkpoint_dir``, ``logs_path``); nothing here changes state. Keeping the UI's
needs in one file means a change inside the master touches one place here.

>>> tensorboard_dir(Path("/ckpt"), 1, 2).name
'trial_2'
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from det_sdk.api import MAX_PAGE_LIMIT
from det_sdk.hparams import flat_hparams
from det_sdk.master.pages import experiment_detail, experiment_page, job_page
from det_sdk.master.tensorboards import tensorboard_dir
from det_sdk.master.ui.series import SeriesCache, minmax_indices
from det_sdk.stages import DEFAULT_STAGE, stored_group

__all__ = ["Views", "read_log", "tensorboard_dir"]

LOG_CHUNK = 1 << 20  # a log is read a megabyte at a time; the page asks for more
PAGE = 100  # list rows per request (the page asks for more as the user does)
TRIALS = MAX_PAGE_LIMIT  # trials an experiment's page shows (its table and charts)
CURVE_TRIALS = 50  # trials the experiment's curves show by default: the best ones
MAX_CURVE_TRIALS = 500
CURVE_POINTS = 200  # validations per trial's curve by default (min/max downsampled)
MAX_CURVE_POINTS = 5000
RUNNING = ("RUNNING", "STOPPING_PAUSED", "STOPPING_CANCELED")  # trials with a process



def read_log(path: Path, offset: int) -> dict[str, Any]:
    """Log text from byte ``offset`` (a negative offset: the last ``-offset`` bytes).

    The answer's ``offset`` is where to read next (a page follows a log with it);
    ``start`` is where this text began.
    """
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            start = max(0, size + offset) if offset < 0 else min(offset, size)
            f.seek(start)
            data = f.read(LOG_CHUNK)
    except FileNotFoundError:
        start, data, size = 0, b"", 0
    if start > 0 and offset < 0:  # began mid-line: drop the partial first line
        cut = data.find(b"\n") + 1
        start, data = start + cut, data[cut:]
    return {"text": data.decode("utf-8", errors="replace"), "start": start,
            "offset": start + len(data), "size": size}


class Views:
    """The pages' data, read from ``master`` (a ``det_sdk.master.core.Master``).

    >>> # views = Views(master)
    >>> # views.experiments(limit=100)["experiments"][0]["state"]
    >>> # views.metrics(trial_id, max_points=2000)["groups"]
    """

    def __init__(self, master: Any) -> None:
        self.master = master
        self.store = master.store
        self.series = SeriesCache(master.store)
        # a job's series, read as a trial's: only the rows past the last step held
        self.job_series = SeriesCache(_JobSeriesSource(master.job_records))

    # --- experiments ----------------------------------------------------------------------

    def experiments(self, limit: int = PAGE, cursor: str | None = None,
                    projects: list[int] | None = None) -> dict[str, Any]:
        """A page of the list, newest first (``det_sdk.master.pages``): ``experiments``,
        ``total`` and ``next_cursor``; ``projects``: only those in these (roles)."""
        now = time.time()
        page = experiment_page(self.master, limit, cursor, projects=projects)
        rows = [{
            "id": e.id, "name": e.name, "state": e.state.value, "searcher": e.searcher,
            "metric": e.metric, "smaller_is_better": e.smaller_is_better,
            "best": e.best_metric, "trials": e.num_trials,
            "running": sum(e.trial_states.get(s, 0) for s in RUNNING),
            "progress": e.progress, "created": e.created, "age": now - e.created,
            "owner": e.username,
            # its workspace and project (issue 59): shown, and filtered by, on the list
            "workspace": e.workspace_name, "project": e.project_name,
        } for e in page.experiments]
        return {"experiments": rows, "total": page.total, "next_cursor": page.next_cursor}

    def experiment(self, exp_id: int) -> dict[str, Any]:
        """The experiment with its first TRIALS trials (``num_trials``: all of them)."""
        # python mode: NaN metrics stay floats (the route makes them null), states strings
        info = experiment_detail(self.master, exp_id, TRIALS).model_dump()
        config = info["config"]
        searcher = config.get("searcher") or {}
        latest_val = self.store.latest_metrics(exp_id, "validation")
        latest_train = self.store.latest_metrics(exp_id, "training")
        for t in info["trials"]:
            t["validation"] = latest_val.get(t["id"], {})
            t["training"] = latest_train.get(t["id"], {})
        info["searcher"] = {
            "name": searcher.get("name"), "metric": searcher.get("metric"),
            "smaller_is_better": searcher.get("smaller_is_better", True),
            "unit": _unit(searcher), "rung_lengths": self._rung_lengths(info),
        }
        # nested hyperparameters show as dotted names (optimizer.learning_rate): each
        # trial's values by that name, and the names with a log scale for the charts
        for t in info["trials"]:
            t["hparams_flat"] = flat_hparams(t["hparams"])
        info["hparam_names"] = sorted({k for t in info["trials"] for k in t["hparams_flat"]})
        info["hparam_log"] = sorted(_log_hparams(config.get("hyperparameters") or {}))
        return info

    def _rung_lengths(self, info: dict[str, Any]) -> list[int]:
        """The searcher's rung lengths over all brackets (vertical lines on the chart)."""
        if not info["trials"]:
            return []
        try:
            from det_sdk.master.searchers import rung_lengths

            cfg = self.master.trial_config(info["trials"][0]["id"])
            brackets = {t["bracket"] for t in info["trials"]}
            return sorted({n for b in brackets for n in rung_lengths(cfg, b)})
        except Exception:  # an optional decoration: never fail the page for it
            return []

    def curves(self, exp_id: int, max_trials: int = CURVE_TRIALS,
               max_points: int = CURVE_POINTS) -> dict[str, Any]:
        """The searcher metric over training length (epochs and batches) of the
        experiment's ``max_trials`` best trials by best metric, in trial id order, each
        downsampled to ``max_points`` validations (0: all; at least 4: a bucket's first,
        last, lowest and highest) by :func:`minmax_indices`, so each curve keeps its lowest
        and highest values. ``total_trials``: how many trials the experiment has.

        The size of the answer is bounded whatever the experiment holds: one LIMIT read of
        the trials' index, then only the chosen trials' validation rows.

        >>> # views.curves(exp_id, max_trials=50, max_points=200)
        >>> # {"metric": "val_loss", "unit": "epochs", "total_trials": 1200,
        >>> #  "trials": [{"id": 7, "steps": [...], "epoch": [...], "value": [...]}, ...]}
        """
        exp = self.store.experiment(exp_id)
        if exp is None:
            self.master.experiment_info(exp_id)  # raises the master's 404
        searcher = exp["config"].get("searcher") or {}
        metric = searcher.get("metric") or "val_loss"
        smaller = searcher.get("smaller_is_better")
        ids, total = self.store.best_trials(exp_id, max_trials, smaller is None or bool(smaller))
        trials: dict[int, dict[str, list[Any]]] = {}
        for trial_id, steps, epoch, value in self.store.validation_metric(ids, metric):
            if not isinstance(value, (int, float)):  # missing, or "NaN" (api.encode_metric)
                continue
            t = trials.setdefault(trial_id, {"steps": [], "epoch": [], "value": []})
            t["steps"].append(steps)
            t["epoch"].append(epoch)
            t["value"].append(value)
        for t in trials.values():
            if 0 < max_points < len(t["steps"]):
                import numpy as np  # here, not at import: the master starts without it

                keep = minmax_indices(np.asarray(t["steps"], dtype=np.float64),
                                      [np.asarray(t["value"], dtype=np.float64)],
                                      max_points).tolist()
                for k, col in t.items():
                    t[k] = [col[i] for i in keep]
        return {"metric": metric, "unit": _unit(searcher), "total_trials": total,
                "trials": [{"id": k, **v} for k, v in sorted(trials.items())]}

    # --- trials ---------------------------------------------------------------------------

    def trial(self, trial_id: int) -> dict[str, Any]:
        info = self.master.trial_info(trial_id)
        exp = self.store.experiment(info["experiment_id"]) or {}
        info["experiment_name"] = exp.get("name")
        info["experiment_state"] = exp.get("state")
        searcher = (exp.get("config") or {}).get("searcher") or {}
        info["searcher_metric"] = searcher.get("metric")
        info["hparams_flat"] = flat_hparams(info["hparams"])  # nested ones by dotted name
        info["checkpoints"] = self.master.checkpoints(trial_id)
        info["groups"] = self.store.metric_group_ends(trial_id)
        t = self.store.trial(trial_id) or {}
        info["created"], info["ended"] = t.get("created"), t.get("ended")
        return info

    def metrics(self, trial_id: int, max_points: int, group: str | None = None,
                x_range: tuple[float, float] | None = None,
                stage: str | None = None) -> dict[str, Any]:
        """Each metric group's series, downsampled to ``max_points`` (0: all of it).

        ``stage``: that stage's series (det_sdk.stages; None: the default stage's)."""
        self.master.trial(trial_id)  # 404 for an unknown trial
        if stage not in (None, DEFAULT_STAGE):
            stored = {g: self.series.get(trial_id, stored_group(g, stage))
                      for g in ([group] if group else ("training", "validation", "evaluation"))}
            series = {g: s for g, s in stored.items() if len(s)}
        else:
            groups = [group] if group else list(self.store.metric_group_ends(trial_id))
            series = {g: self.series.get(trial_id, g) for g in groups}
        t0 = min((s.time[0] for s in series.values() if len(s)), default=None)
        out = {g: s.to_json(max_points, x_range, t0) for g, s in series.items()}
        steps_per_epoch = _steps_per_epoch(series.values())
        return {"groups": out, "steps_per_epoch": steps_per_epoch, "t0": t0}

    # --- jobs -----------------------------------------------------------------------------

    def jobs(self, limit: int = PAGE, cursor: str | None = None) -> dict[str, Any]:
        """A page of the jobs, newest first: ``jobs``, ``total`` and ``next_cursor``."""
        now = time.time()
        page = job_page(self.master, limit, cursor)
        return {"jobs": [{**j.model_dump(mode="json"), "age": now - j.created}
                         for j in page.jobs],
                "total": page.total, "next_cursor": page.next_cursor}

    def job(self, job_id: int) -> dict[str, Any]:
        """The job with its progress (rows, rows per second, time left), output, restarts
        and latest metrics: what `det job describe` shows; its throughput over time (rows
        per second, from the kept progress reports) and the last step of each metric
        group (the page loads the series when one changes)."""
        info = self.master.job_info(job_id)
        info["throughput"] = self.master.job_throughput(job_id)
        info["groups"] = self.master.job_records.metric_group_ends(job_id)
        return info

    def job_metrics(self, job_id: int, max_points: int) -> dict[str, Any]:
        """A job's metric groups as a trial's (``metrics``): each series downsampled to
        ``max_points`` (0: all of it), times from the job's first report."""
        self.master.job(job_id)  # 404 for an unknown job
        series = {g: self.job_series.get(job_id, g)
                  for g in self.master.job_records.metric_group_ends(job_id)}
        t0 = min((s.time[0] for s in series.values() if len(s)), default=None)
        return {"groups": {g: s.to_json(max_points, None, t0) for g, s in series.items()},
                "steps_per_epoch": _steps_per_epoch(series.values()), "t0": t0}

    def models(self) -> list[dict[str, Any]]:
        """The model registry (det_sdk.master.models): each model with its versions, each
        version with its checkpoint's trial and batches."""
        from det_sdk.master.models import ModelRegistry

        registry = ModelRegistry(self.master.store)
        out = []
        for m in registry.list():
            versions = []
            for v in registry.versions(m["name"]):
                ckpt = self.master.store.checkpoint(v["checkpoint_uuid"]) or {}
                versions.append({**v, "trial_id": ckpt.get("trial_id"),
                                 "steps": ckpt.get("steps")})
            out.append({**m, "versions": versions})
        return out

    # --- TensorBoard ------------------------------------------------------------------------

    def tensorboard_dirs(self, exp_ids: list[int]) -> list[dict[str, Any]]:
        """Each trial's TensorBoard directory (present or not yet) of these experiments."""
        # the master's own answer (404 for an unknown experiment, 400 for one without
        # trials): the same directories `det tensorboard start` shows
        return [{"experiment_id": s.experiment_id, "trial_id": s.trial_id, "path": s.path,
                 "exists": Path(s.path).is_dir()}
                for s in self.master.tensorboard_sources(exp_ids, [])]


def _log_hparams(space: Any, prefix: str = "") -> list[str]:
    """The dotted names of a config's log-scale hyperparameters, in nested groups too.

    >>> _log_hparams({"lr": {"type": "log", "minval": -4, "maxval": -1}, "bs": 32,
    ...               "opt": {"m": {"type": "log", "minval": -2, "maxval": 0}, "n": 1}})
    ['lr', 'opt.m']
    """
    out: list[str] = []
    for name, spec in (space.items() if isinstance(space, dict) else ()):
        if isinstance(spec, dict) and "type" not in spec:  # a nested group
            out += _log_hparams(spec, f"{prefix}{name}.")
        elif isinstance(spec, dict) and spec.get("type") == "log":
            out.append(f"{prefix}{name}")
    return out


def _unit(searcher: dict[str, Any]) -> str:
    length = searcher.get("max_length") or {}
    if isinstance(length, dict) and length:
        return "epochs" if "epochs" in length else "batches"
    return "batches"


def _steps_per_epoch(series: Any) -> float | None:
    """Batches per epoch over a trial's groups (None before an epoch ended)."""
    found = [s.steps_per_epoch() for s in series]
    return min((f for f in found if f is not None), default=None)


class _JobSeriesSource:
    """What ``SeriesCache`` reads of a trial, for a job (``det_sdk.master.job_records``):
    its generation (a trial's restarts; a job's processes, each of which may report steps
    again) and its metric columns past a step."""

    def __init__(self, records: Any) -> None:
        self.records = records

    def trial(self, job_id: int) -> dict[str, Any]:
        return {"restarts": self.records.processes(job_id)}

    def metric_columns(self, job_id: int, group: str, after_steps: int | None = None
                       ) -> tuple[str, str, str, str] | None:
        return self.records.metric_columns(job_id, group, after_steps)
