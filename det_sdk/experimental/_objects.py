"""Experiments, trials and checkpoints of Determined 0.38's Python SDK, read from det_sdk's
master (names and signatures as in ``determined.experimental.client``)."""

from __future__ import annotations

import enum
import io
import json
import math
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The master's own states, one class for both (Determined's names are the same words)
from det_sdk.api import ExperimentState
from det_sdk.errors import DetSdkError

__all__ = ["Checkpoint", "ClientError", "Experiment", "ExperimentState", "OrderBy", "Trial",
           "TrialMetrics"]


class ClientError(DetSdkError, ValueError):
    """A call of the Python SDK that cannot be answered as asked."""


class OrderBy(enum.Enum):
    """Determined's sort order (``ASC``/``DESC``, also ``ASCENDING``/``DESCENDING``)."""

    ASC = "ASC"
    DESC = "DESC"
    ASCENDING = "ASC"
    DESCENDING = "DESC"


# the profiler's metric groups (det_sdk.profiler.SYSTEM_GROUPS)
_SYSTEM_GROUPS = ("gpu", "cpu", "memory", "disk", "network", "timings")

TERMINAL = {ExperimentState.CANCELED, ExperimentState.COMPLETED, ExperimentState.ERROR}


@dataclass
class TrialMetrics:
    """One report of a trial (Determined's ``TrialMetrics``)."""

    trial_id: int
    trial_run_id: int
    steps_completed: int
    end_time: float | None
    metrics: dict[str, Any]
    group: str
    batch_metrics: list[dict[str, Any]] | None = None
    epoch: int = 0


def _rank(rows: list[dict[str, Any]], metric: str | None, smaller_is_better: bool,
          sort_by: Any, order_by: OrderBy | None) -> list[dict[str, Any]]:
    """Checkpoint rows best first: by a validation metric (rows without it last), or by
    a checkpoint attribute (``steps_completed``, ``uuid``...)."""
    if (sort_by is None) != (order_by is None):
        raise ClientError("list_checkpoints: give sort_by and order_by both, or neither")
    name = getattr(sort_by, "value", sort_by) or metric
    descending = (order_by == OrderBy.DESC) if order_by is not None else not smaller_is_better
    if name in ("steps_completed", "batch_number", "end_time", "uuid", "trial_id"):
        key = {"batch_number": "steps_completed", "end_time": "created"}.get(name, name)
        return sorted(rows, key=lambda r: r.get(key) or 0, reverse=descending)
    if not name:
        raise ClientError("list_checkpoints: the experiment has no searcher metric: give "
                          "sort_by=<validation metric> and order_by")

    def value(r: dict[str, Any]) -> float:
        v = (r.get("metrics") or {}).get(name)
        return v if isinstance(v, (int, float)) and not math.isnan(v) else math.nan

    have = [r for r in rows if not math.isnan(value(r))]
    return sorted(have, key=value, reverse=descending) + [r for r in rows if r not in have]


class Checkpoint:
    """A checkpoint the master knows (Determined's ``Checkpoint``)."""

    def __init__(self, session: Any, row: dict[str, Any]) -> None:
        self._session = session
        self._row = row
        self.uuid: str = row["uuid"]
        self.trial_id: int = row["trial_id"]
        self.state = "COMPLETED"
        self.training = {"trial_id": row["trial_id"], "experiment_id": row.get("experiment_id"),
                         "validation_metrics": {"avgMetrics": row.get("metrics") or {}}}

    def __repr__(self) -> str:
        return f"Checkpoint(uuid={self.uuid})"

    @property
    def metadata(self) -> dict[str, Any]:
        """The checkpoint's ``metadata.json`` (steps, metrics, framework...), or what the
        master holds of it when the directory is not readable from here."""
        path = self._row.get("path")
        if path and (Path(path) / "metadata.json").is_file():
            return json.loads((Path(path) / "metadata.json").read_text())
        return {k: v for k, v in self._row.items() if k != "path"}

    def download(self, path: str | None = None, mode: Any = None) -> str:
        """Copy the checkpoint's files into ``path`` (default ``checkpoints/<uuid>``) and
        return that directory."""
        dest = Path(path or Path("checkpoints") / self.uuid)
        dest.mkdir(parents=True, exist_ok=True)
        data = self._session.download_checkpoint(self.uuid)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            kwargs: dict[str, Any] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(dest, **kwargs)
        return str(dest)

    def reload(self) -> None:
        self._row = self._session.checkpoint(self.uuid)


class Trial:
    """A trial (Determined's ``Trial``): its metrics and checkpoints."""

    def __init__(self, session: Any, trial_id: int, row: dict[str, Any] | None = None) -> None:
        self._session = session
        self.id = int(trial_id)
        self._row = row if row is not None else session.trial(self.id)

    def __repr__(self) -> str:
        return f"Trial(id={self.id})"

    @property
    def experiment_id(self) -> int:
        return int(self._row["experiment_id"])

    @property
    def hparams(self) -> dict[str, Any]:
        return dict(self._row.get("hparams") or {})

    @property
    def state(self) -> str:
        return str(self._row["state"])

    def reload(self) -> None:
        self._row = self._session.trial(self.id)

    def get_experiment(self) -> Experiment:
        return Experiment(self._session, self.experiment_id)

    def iter_metrics(self, group: str) -> Iterator[TrialMetrics]:
        """This trial's reports of ``group`` (``"training"``, ``"validation"``), in order.

        The profiler's groups as Determined 0.38 names them (``"gpu"``, ``"cpu"``,
        ``"memory"``, ``"disk"``, ``"network"``, and det_sdk's ``"timings"``), or
        ``"system"`` for all of them: its records, ``metrics`` per host
        (det_sdk.profiler), ``end_time`` the time of the report."""
        if group == "system" or group in _SYSTEM_GROUPS:
            run = int(self._row.get("restarts", 0))
            for r in self._session.system_metrics(self.id, None if group == "system"
                                                  else group):
                yield TrialMetrics(trial_id=self.id, trial_run_id=run,
                                   steps_completed=r.get("steps_completed") or 0,
                                   end_time=r["time"], metrics=r["metrics"], group=r["group"])
            return
        for r in self._session.trial_metrics(self.id, group):
            yield TrialMetrics(trial_id=self.id, trial_run_id=int(self._row.get("restarts", 0)),
                               steps_completed=r["steps_completed"], end_time=None,
                               metrics=r["metrics"], group=r["group"], epoch=r.get("epoch", 0))

    stream_metrics = iter_metrics

    def iter_logs(self, follow: bool = False, **filters: Any) -> Iterator[str]:
        """This trial's log lines, filtered as Determined's ``Trial.iter_logs`` filters
        (``head``, ``tail``, ``rank_ids``, ``stdtypes``, ``min_level``,
        ``timestamp_before``, ``timestamp_after``, ``sources``, ``search_text``:
        ``det_sdk.experimental._logs``)."""
        from det_sdk.experimental._logs import iter_trial_logs

        return iter_trial_logs(self._session, self.id, follow, **filters)

    def logs(self, follow: bool = False, **filters: Any) -> Iterator[str]:
        """Determined's older name of :meth:`iter_logs`."""
        return self.iter_logs(follow, **filters)

    def stream_training_metrics(self) -> Iterator[TrialMetrics]:
        return self.iter_metrics("training")

    def stream_validation_metrics(self) -> Iterator[TrialMetrics]:
        return self.iter_metrics("validation")

    def _searcher(self) -> tuple[str | None, bool]:
        exp = self.get_experiment()
        return exp._searcher()

    def _order(self, sort_by: str | None, smaller_is_better: bool | None) -> OrderBy | None:
        """``top_checkpoint``'s order: the config's ``smaller_is_better`` when not given."""
        if sort_by is None:
            return None
        smaller = self._searcher()[1] if smaller_is_better is None else smaller_is_better
        return OrderBy.ASC if smaller else OrderBy.DESC

    def list_checkpoints(self, sort_by: Any = None, order_by: OrderBy | None = None,
                         max_results: int | None = None) -> list[Checkpoint]:
        """This trial's checkpoints, best first by the searcher metric unless ``sort_by``
        (a validation metric or ``CheckpointSortBy``) and ``order_by`` say otherwise."""
        metric, smaller = self._searcher()
        rows = _rank(self._session.checkpoints(trial_id=self.id), metric, smaller, sort_by,
                     order_by)
        return [Checkpoint(self._session, r) for r in rows[:max_results]]

    def top_checkpoint(self, sort_by: str | None = None,
                       smaller_is_better: bool | None = None) -> Checkpoint:
        """The best checkpoint by ``sort_by`` (default: the searcher metric)."""
        return _top(self, f"trial {self.id}", sort_by, smaller_is_better)

    def kill(self) -> None:
        raise ClientError("det_sdk's master kills experiments, not single trials: "
                          "get_experiment(id).kill()")


class Experiment:
    """An experiment (Determined's ``Experiment``)."""

    def __init__(self, session: Any, experiment_id: int) -> None:
        self._session = session
        self.id = int(experiment_id)
        self._row: dict[str, Any] = {}
        self.reload()

    def __repr__(self) -> str:
        return f"Experiment(id={self.id})"

    def reload(self) -> None:
        self._row = self._session.experiment(self.id)

    @property
    def state(self) -> ExperimentState:
        return ExperimentState(self._row["state"])

    @property
    def name(self) -> str | None:
        return self._row.get("name")

    @property
    def config(self) -> dict[str, Any]:
        return dict(self._row.get("config") or {})

    def _searcher(self) -> tuple[str | None, bool]:
        searcher = self.config.get("searcher") or {}
        return searcher.get("metric"), bool(searcher.get("smaller_is_better", True))

    def _order(self, sort_by: str | None, smaller_is_better: bool | None) -> OrderBy | None:
        """``top_checkpoint``'s order: the config's ``smaller_is_better`` when not given."""
        if sort_by is None:
            return None
        smaller = self._searcher()[1] if smaller_is_better is None else smaller_is_better
        return OrderBy.ASC if smaller else OrderBy.DESC

    def activate(self) -> None:
        self._session.activate_experiment(self.id)

    def pause(self) -> None:
        self._session.pause_experiment(self.id)

    def kill(self) -> None:
        self._session.kill_experiment(self.id)

    cancel = kill

    def wait(self, interval: float = 5.0) -> ExperimentState:
        """Wait until the experiment ends; its final state. A paused one is an error, as
        in Determined (nothing would end it)."""
        while True:
            self.reload()
            if self.state in TERMINAL:
                return self.state
            if self.state == ExperimentState.PAUSED:
                raise ClientError(f"experiment {self.id} is paused: activate it first")
            time.sleep(interval)

    def list_trials(self, sort_by: Any = None, order_by: OrderBy | None = None,
                    limit: int | None = None) -> list[Trial]:
        rows = self._session.trials(self.id)
        if order_by == OrderBy.DESC:
            rows = rows[::-1]
        return [Trial(self._session, r["id"], r) for r in rows[:limit]]

    get_trials = list_trials

    def iter_trials(self, sort_by: Any = None, order_by: OrderBy | None = None
                    ) -> Iterator[Trial]:
        yield from self.list_trials(sort_by, order_by)

    def list_checkpoints(self, sort_by: Any = None, order_by: OrderBy | None = None,
                         max_results: int | None = None) -> list[Checkpoint]:
        """The experiment's checkpoints, best first by the searcher metric unless
        ``sort_by`` and ``order_by`` say otherwise."""
        metric, smaller = self._searcher()
        rows = [r for t in self._session.trials(self.id)
                for r in self._session.checkpoints(trial_id=t["id"])]
        rows = _rank(rows, metric, smaller, sort_by, order_by)
        return [Checkpoint(self._session, r) for r in rows[:max_results]]

    def top_checkpoint(self, sort_by: str | None = None,
                       smaller_is_better: bool | None = None) -> Checkpoint:
        """The best checkpoint of all its trials by ``sort_by`` (default: the searcher
        metric)."""
        return _top(self, f"experiment {self.id}", sort_by, smaller_is_better)

    def top_n_checkpoints(self, limit: int, sort_by: str | None = None,
                          smaller_is_better: bool | None = None) -> list[Checkpoint]:
        order = self._order(sort_by, smaller_is_better)
        return self.list_checkpoints(sort_by=sort_by, order_by=order, max_results=limit)


def _top(owner: Any, what: str, sort_by: str | None,
         smaller_is_better: bool | None) -> Checkpoint:
    """``owner``'s (a Trial's or an Experiment's) best checkpoint by ``sort_by``."""
    order = owner._order(sort_by, smaller_is_better)
    best = owner.list_checkpoints(sort_by=sort_by, order_by=order, max_results=1)
    if not best:
        raise ClientError(f"{what} has no checkpoint")
    return best[0]
