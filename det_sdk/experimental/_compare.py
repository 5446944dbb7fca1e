"""Experiments side by side in the Python client: ``client.compare(experiment_ids=[...])``.

One call of the master's ``GET /api/v1/compare`` (``det_sdk.master.compare``): the chosen
trials' metric series, hyperparameters and configs, the rows that differ marked. What
comes back is plain lists of dicts (pandas is not needed, nor imported):
``pandas.DataFrame(comparison.records)`` is a frame of one row per trial, group and
reported step, and ``pandas.DataFrame(comparison.table())`` one of a row per
hyperparameter or config field with a column per trial.

>>> answer = {"trials": [
...     {"id": 3, "experiment_id": 1, "hparams": {"lr": 0.1}, "series": {"training": {
...         "steps": [1, 2], "epoch": [0, 0], "metrics": {"loss": [0.9, None]},
...         "downsampled": False}}},
...     {"id": 4, "experiment_id": 2, "hparams": {"lr": 0.01}, "series": {}}],
...  "hparams": [{"name": "lr", "values": [0.1, 0.01], "differs": True}],
...  "config": [{"name": "max_restarts", "values": [5, 5], "differs": False}]}
>>> c = Comparison(answer)
>>> c.records
[{'experiment_id': 1, 'trial_id': 3, 'group': 'training', 'steps_completed': 1, 'epoch': 0, \
'hp.lr': 0.1, 'loss': 0.9}, {'experiment_id': 1, 'trial_id': 3, 'group': 'training', \
'steps_completed': 2, 'epoch': 0, 'hp.lr': 0.1}]
>>> c.differences()
{'hparams': {'lr': {3: 0.1, 4: 0.01}}, 'config': {}}
>>> c.table(only_differences=True)
[{'section': 'hparams', 'name': 'lr', 'differs': True, 'trial 3': 0.1, 'trial 4': 0.01}]
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["MAX_POINTS", "MAX_TRIALS", "Comparison", "compare"]

# the master's bounds (det_sdk.master.compare; repeated so the client imports no master)
MAX_TRIALS = 50
MAX_POINTS = 5000


class Comparison:
    """The master's answer to a comparison, as DataFrame-ready lists of dicts.

    ``trials``: each trial's experiment, state, batches, best metric, flattened
    hyperparameters (``hparams``) and series, as the master sent them;
    ``experiments``: each one's config (secrets masked); ``hparams`` and ``config``:
    rows of ``{name, values (one per trial, in the trials' order), differs}``.
    """

    def __init__(self, answer: dict[str, Any]) -> None:
        self.answer = answer
        self.trials: list[dict[str, Any]] = answer["trials"]
        self.experiments: list[dict[str, Any]] = answer.get("experiments", [])
        self.hparams: list[dict[str, Any]] = answer.get("hparams", [])
        self.config: list[dict[str, Any]] = answer.get("config", [])

    def __repr__(self) -> str:
        return (f"Comparison(trials={self.trial_ids}, "
                f"differing={sum(r['differs'] for r in self.hparams + self.config)})")

    @property
    def trial_ids(self) -> list[int]:
        return [t["id"] for t in self.trials]

    @property
    def records(self) -> list[dict[str, Any]]:
        """One dict per trial, metric group and reported step: ``experiment_id``,
        ``trial_id``, ``group``, ``steps_completed``, ``epoch``, each hyperparameter as
        ``hp.<dotted name>`` (``hp.optimizer.lr``: nested ones flattened), then the
        metrics reported at that step (a metric not reported there is left out: NaN in
        a DataFrame). Ready for ``pandas.DataFrame(records)``."""
        out: list[dict[str, Any]] = []
        for t in self.trials:
            hps = {f"hp.{k}": v for k, v in t["hparams"].items()}
            for group, s in t["series"].items():
                names = list(s["metrics"])
                for i, steps in enumerate(s["steps"]):
                    row = {"experiment_id": t["experiment_id"], "trial_id": t["id"],
                           "group": group, "steps_completed": steps,
                           "epoch": s["epoch"][i], **hps}
                    for name in names:
                        value = s["metrics"][name][i]
                        if value is not None:
                            row[name] = value
                    out.append(row)
        return out

    @property
    def downsampled(self) -> list[tuple[int, str]]:
        """The (trial, group) series the master downsampled (longer than ``max_points``:
        each bucket's first, last and extremes kept). ``Trial.iter_metrics`` reads every
        report of one."""
        return [(t["id"], g) for t in self.trials for g, s in t["series"].items()
                if s.get("downsampled")]

    def differences(self) -> dict[str, dict[str, dict[int, Any]]]:
        """The hyperparameters and config fields whose values differ between the trials:
        ``{"hparams": {name: {trial_id: value}}, "config": {...}}`` (None: the trial's
        experiment has no such field)."""
        ids = self.trial_ids
        return {section: {r["name"]: dict(zip(ids, r["values"])) for r in rows if r["differs"]}
                for section, rows in (("hparams", self.hparams), ("config", self.config))}

    def table(self, only_differences: bool = False) -> list[dict[str, Any]]:
        """The hyperparameters, then the config fields, a dict per row: ``section``,
        ``name``, ``differs`` and a ``"trial <id>"`` value per trial; with
        ``only_differences``, the rows that differ only."""
        out = []
        for section, rows in (("hparams", self.hparams), ("config", self.config)):
            for r in rows:
                if only_differences and not r["differs"]:
                    continue
                out.append({"section": section, "name": r["name"], "differs": r["differs"],
                            **{f"trial {t}": v for t, v in zip(self.trial_ids, r["values"])}})
        return out


def compare(session: Any, experiment_ids: Iterable[int] | None = None,
            trial_ids: Iterable[int] | None = None, best: int | None = None,
            max_points: int = MAX_POINTS) -> Comparison:
    """Compare trials on the master of ``session`` (a ``det_sdk.client.MasterClient``):
    every trial of ``experiment_ids`` (with ``best``: each one's best few by the searcher
    metric) and ``trial_ids`` of any experiment; at most :data:`MAX_TRIALS` trials (the
    master refuses more, naming the limit), each series at most ``max_points`` points.

    >>> # compare(MasterClient(url, token), experiment_ids=[1, 2]).records[0]["hp.lr"]
    """
    params: dict[str, Any] = {"experiment_ids": list(experiment_ids or []),
                              "trial_ids": list(trial_ids or []), "max_points": max_points}
    if best is not None:
        params["best"] = best
    return Comparison(session.request("GET", "/api/v1/compare", params=params))
