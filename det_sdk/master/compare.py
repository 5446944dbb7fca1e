"""Experiments side by side: several trials' metric series, hyperparameters and configs
in one bounded answer, with the rows that differ marked.

What the web UI's compare page (``#/compare``) and the Python client's ``compare``
(``det_sdk.experimental``) read, through ``/ui/api/compare`` and ``/api/v1/compare``
(``det_sdk.master.routes.compare``). Trials are chosen by experiment (all of its
trials, or its ``best`` few by the searcher metric) and by trial id, across
experiments. The answer is bounded whatever the experiments hold: at most
:data:`MAX_TRIALS` trials (more is refused, naming the limit) and each series
downsampled to ``max_points`` (at most :data:`MAX_POINTS`) by keeping each bucket's
extremes (``det_sdk.master.ui.series``).

>>> rows = diff_rows([{"lr": 0.1, "units": 8}, {"lr": 0.01, "units": 8}])
>>> [(r["name"], r["values"], r["differs"]) for r in rows]
[('lr', [0.1, 0.01], True), ('units', [8, 8], False)]
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from det_sdk.config.storage import mask_config_secrets
from det_sdk.hparams import flat_hparams
from det_sdk.master.errors import InvalidRequest, NotFound
from det_sdk.master.ui.series import SeriesCache

__all__ = ["DEFAULT_POINTS", "MAX_POINTS", "MAX_TRIALS", "Comparer", "diff_rows",
           "flat_config"]

MAX_TRIALS = 50  # trials one comparison shows (Determined's compare view took 50 too)
MAX_POINTS = 5000  # points per series at most (each series min/max downsampled)
DEFAULT_POINTS = 1000
MIN_POINTS = 10  # below this a bucket's first, last and extremes no longer fit
_MISSING = "\0missing"  # what a trial without a hyperparameter compares as


def flat_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A config by dotted name (``searcher.metric``), its search space
    (``hyperparameters``) left out: each trial's values are compared instead. Lists
    stay values (compared whole).

    >>> flat_config({"name": "a", "searcher": {"name": "single", "metric": "loss"},
    ...              "hyperparameters": {"lr": 0.1}, "bind_mounts": []})
    {'name': 'a', 'searcher.name': 'single', 'searcher.metric': 'loss', 'bind_mounts': []}
    """
    out: dict[str, Any] = {}
    for key, value in config.items():
        if not prefix and key == "hyperparameters":
            continue
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flat_config(value, f"{name}."))
        else:
            out[name] = value
    return out


def diff_rows(columns: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per name found in any column, in name order: its value in each column
    (None where a column lacks it) and whether the columns differ (a missing value
    differs from any value, None included).

    >>> diff_rows([{"a": 1}, {"a": 1, "b": None}])[1]
    {'name': 'b', 'values': [None, None], 'differs': True}
    """
    names = sorted({k for c in columns for k in c})
    rows = []
    for name in names:
        seen = {_key(c[name]) if name in c else _MISSING for c in columns}
        rows.append({"name": name, "values": [c.get(name) for c in columns],
                     "differs": len(seen) > 1})
    return rows


def _key(value: Any) -> str:
    """What a value compares as: JSON, a whole float as its integer (YAML's ``1.0`` and
    ``1`` are one number, and the page shows both as 1).

    >>> _key({"b": [1.0, True], "a": 0.5}) == _key({"a": 0.5, "b": [1, True]})
    True
    """
    def norm(v: Any) -> Any:
        if isinstance(v, float) and v.is_integer():
            return int(v)
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        if isinstance(v, list):
            return [norm(x) for x in v]
        return v
    return json.dumps(norm(value), sort_keys=True, default=str)


class Comparer:
    """Comparisons over ``master`` (a ``det_sdk.master.core.Master``); its series cache
    is kept between calls (only new reports are read on the next one).

    >>> # Comparer(master).compare(experiment_ids=[1, 2])["hparams"][0]["differs"]
    """

    def __init__(self, master: Any) -> None:
        self.master = master
        self.store = master.store
        self.series = SeriesCache(master.store, capacity=3 * MAX_TRIALS)

    def trial_ids(self, experiment_ids: Sequence[int], trial_ids: Sequence[int],
                  best: int | None = None) -> list[int]:
        """The trials chosen: each experiment's (all, or its ``best`` by the searcher
        metric), then ``trial_ids``, without repeats, in that order. Refused
        (:class:`InvalidRequest`, naming the limit) past :data:`MAX_TRIALS`."""
        if not experiment_ids and not trial_ids:
            raise InvalidRequest("experiment_ids, trial_ids: name at least one experiment "
                                 "or trial to compare")
        if best is not None and not 1 <= best <= MAX_TRIALS:
            raise InvalidRequest(f"best: 1 to {MAX_TRIALS} trials per experiment, got {best}")
        chosen: dict[int, None] = {}
        for exp_id in dict.fromkeys(experiment_ids):
            exp = self.store.experiment(exp_id)
            if exp is None:
                raise NotFound(f"no experiment {exp_id}")
            if best is not None:
                searcher = (exp["config"] or {}).get("searcher") or {}
                smaller = searcher.get("smaller_is_better")
                ids, _ = self.store.best_trials(exp_id, best, smaller is None or bool(smaller))
            else:
                counts, _ = self.store.trial_state_counts(exp_id)
                if sum(counts.values()) + len(chosen) > MAX_TRIALS:
                    self._too_many(sum(counts.values()) + len(chosen))
                rows, _ = self.store.trial_page(exp_id, None, MAX_TRIALS + 1)
                ids = [t["id"] for t in rows]
            chosen.update(dict.fromkeys(ids))
        for trial_id in trial_ids:
            if self.store.trial(trial_id) is None:
                raise NotFound(f"no trial {trial_id}")
            chosen[trial_id] = None
        if len(chosen) > MAX_TRIALS:
            self._too_many(len(chosen))
        return list(chosen)

    @staticmethod
    def _too_many(n: int) -> None:
        raise InvalidRequest(
            f"experiment_ids, trial_ids: {n} trials chosen, more than the {MAX_TRIALS} a "
            f"comparison shows; name fewer, or each experiment's best few (best=N)")

    def compare(self, experiment_ids: Sequence[int] = (), trial_ids: Sequence[int] = (),
                best: int | None = None, max_points: int = DEFAULT_POINTS) -> dict[str, Any]:
        """The chosen trials side by side (:meth:`trial_ids` chooses them).

        ``trials``: each one's experiment, state, batches, best metric, flattened
        hyperparameters and metric series (``{group: {steps, epoch, time, metrics,
        total, downsampled}}``, each downsampled to ``max_points``); ``experiments``:
        their configs (secrets masked); ``hparams`` and ``config``: one row per
        name, a value per trial (in the trials' order) and ``differs``.
        """
        if not MIN_POINTS <= max_points <= MAX_POINTS:
            raise InvalidRequest(f"max_points: {MIN_POINTS} to {MAX_POINTS} points per "
                                 f"series, got {max_points}")
        ids = self.trial_ids(experiment_ids, trial_ids, best)
        experiments: dict[int, dict[str, Any]] = {}
        trials = []
        for trial_id in ids:
            t = self.store.trial(trial_id)
            if t is None:  # deleted between the two reads
                raise NotFound(f"no trial {trial_id}")
            exp_id = t["experiment_id"]
            if exp_id not in experiments:
                exp = self.store.experiment(exp_id) or {"name": None, "state": None,
                                                        "config": {}}
                config = mask_config_secrets(exp["config"] or {})
                searcher = config.get("searcher") or {}
                experiments[exp_id] = {
                    "id": exp_id, "name": exp["name"], "state": exp["state"],
                    "config": config, "searcher_metric": searcher.get("metric"),
                    "smaller_is_better": searcher.get("smaller_is_better", True)}
            series = {g: self.series.get(trial_id, g)
                      for g in self.store.metric_group_ends(trial_id)}
            t0 = min((s.time[0] for s in series.values() if len(s)), default=None)
            trials.append({
                "id": trial_id, "experiment_id": exp_id,
                "experiment_name": experiments[exp_id]["name"], "state": t["state"],
                "steps_completed": t["steps_completed"], "epoch": t["epoch"],
                "best_metric": t["best_metric"],
                "searcher_metric": experiments[exp_id]["searcher_metric"],
                "hparams": flat_hparams(t["hparams"] or {}),
                "series": {g: s.to_json(max_points, None, t0) for g, s in series.items()},
            })
        configs = {e: flat_config(x["config"]) for e, x in experiments.items()}
        return {
            "trials": trials,
            "experiments": list(experiments.values()),
            "hparams": diff_rows([t["hparams"] for t in trials]),
            "config": diff_rows([configs[t["experiment_id"]] for t in trials]),
            "limits": {"max_trials": MAX_TRIALS, "max_points": MAX_POINTS},
        }
