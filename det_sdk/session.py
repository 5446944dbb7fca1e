"""The session seam: how a training process talks to whatever keeps its records.

Off the cluster that is a local run directory; on the cluster the master over
HTTP. The Keras context holds one ``Session`` and never asks which one.

A local run directory (default ``./det-runs/<run-id>/``)::

    run.json            run id, seed, hparams, config, created
    metrics.jsonl       one JSON object per report: group, steps_completed, epoch, metrics
    checkpoints.jsonl   one JSON object per checkpoint: uuid, steps_completed, epoch, metrics
    deleted.jsonl       one JSON object per checkpoint retention deleted: uuid, time
    checkpoints/<uuid>/ the checkpoints themselves (see det_sdk.keras checkpoint format)
    tensorboard/        TensorBoard event files

>>> import tempfile
>>> runs = tempfile.mkdtemp()
>>> s = LocalSession.create(runs, hparams={"lr": 0.1}, seed=7, config={})
>>> s.run_id
1
>>> s.report_metrics("validation", steps_completed=10, epoch=1, metrics={"val_loss": 0.5})
>>> [r["metrics"] for r in s.read_metrics()]
[{'val_loss': 0.5}]
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import queue
import shutil
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from det_sdk.atomic import write_atomic
from det_sdk.config import Length
from det_sdk.config.storage import URL_TYPES, mask_config_secrets
from det_sdk.errors import DetSdkError, ReportRefusedError, StateError
from det_sdk.stages import (
    DEFAULT_STAGE,
    forget_after,
    group_by_stage,
    kept_per_stage,
    record_fields,
    stage_of,
)
from det_sdk.storage import (
    CheckpointNotFoundError,
    CheckpointStorage,
    best_first,
    check_uuid,
    open_storage,
)
from det_sdk.wire import check_metrics, decode_metrics
from det_sdk.wire import dumps as wire_dumps

__all__ = [
    "LocalSession",
    "MasterSession",
    "RunNotFoundError",
    "Session",
    "find_runs_dir_checkpoint",
    "list_runs",
]

MetricGroup = Literal["training", "validation", "evaluation"]
DEFAULT_RUNS_DIR = "det-runs"

log = logging.getLogger("det_sdk.session")


class RunNotFoundError(DetSdkError, LookupError):
    """No local run with that id (or no run at all, for ``resume="latest"``)."""


class Session:
    """Records of one trial/run: metrics, checkpoints, and the outside's instructions."""

    trial_id: int | str | None
    storage: CheckpointStorage
    latest_checkpoint: str | None
    tensorboard_dir: Path | None
    # Where relative paths of the files callbacks write are kept (None: as given, in the
    # working directory). On the cluster, a folder of the trial's in checkpoint storage.
    files_dir: Path | None = None

    # The reports below take the stage they belong to (det_sdk.stages) as arguments:
    # ``stage`` names it (the default stage's records carry no stage field) and
    # ``searched`` says whether the searcher's length applies to it.

    def report_metrics(
        self, group: MetricGroup, steps_completed: int, epoch: int, metrics: Mapping[str, float],
        *, stage: str = DEFAULT_STAGE, searched: bool = True,
    ) -> None:
        raise NotImplementedError

    def report_checkpoint(self, uuid: str, metadata: Mapping[str, Any], *,
                          stage: str = DEFAULT_STAGE, searched: bool = True) -> None:
        raise NotImplementedError

    def checkpoint_for_trial(self, trial_id: int | str, best: bool = False,
                             stage: str | None = None) -> str:
        """UUID of a trial's latest (or best, by the searcher metric) checkpoint; of
        ``stage`` (det_sdk.stages) when given."""
        raise NotImplementedError

    def checkpoint_path(self, uuid: str) -> Path:
        """Local directory holding checkpoint ``uuid`` (downloaded if need be)."""
        raise NotImplementedError

    def stage_checkpoints(self) -> list[dict[str, Any]]:
        """This trial's checkpoint records oldest first (``uuid``, ``stage`` but for the
        default stage), those a resume can use: which stages it reached, and where."""
        return [{"uuid": self.latest_checkpoint}] if self.latest_checkpoint else []

    def training_length(self) -> Length | None:
        """How long to train when told by the outside; ``None``: as the script says."""
        return None

    def complete_operation(self, length: Length, searcher_metric: float | None) -> Length | None:
        """Training reached ``length`` (from :meth:`training_length`) and was validated.

        Returns the next length to train to, or None: stop. Off the cluster there is
        one length only.
        """
        return None

    def should_preempt(self) -> bool:
        """True when the outside asks this process to checkpoint and stop."""
        return False

    def report_progress(self, fraction: float, *, searched: bool = True) -> None:
        """Fraction of the training length done, for progress displays (a trial's progress
        is its ``searched`` stage's; the other stages' is not reported)."""

    def report_rows(self, rows_done: int, rows_total: int | None,
                    output: str | None = None) -> None:
        """A batch job's progress: rows done of ``rows_total`` (None: unknown), and
        where its output goes. Kept by the master for a generic job (``det job
        describe``); nothing elsewhere."""

    def acknowledge_preemption(self) -> None:
        """Tell the outside that this process stops because it was asked to (so its exit
        is a stop to resume, not the end of training). Nothing off the cluster."""

    def close(self) -> None:
        """Deliver what is pending and release resources."""

    def resume_hint(self) -> str:
        """How a user continues this trial after it stopped (shown when it stops)."""
        return ""


class LocalSession(Session):
    """A run directory on the local filesystem."""

    def __init__(self, run_dir: Path, run_info: Mapping[str, Any], writer: bool = True,
                 storage_config: Mapping[str, Any] | None = None) -> None:
        self.run_dir = run_dir
        # One process of a distributed run writes; the others only read checkpoints.
        self.writer = writer
        self.runs_dir = run_dir.parent
        self.run_id: int = int(run_info["run_id"])
        self.trial_id = self.run_id
        self.info = dict(run_info)
        # the config's checkpoint_storage: shared_fs keeps them in the run's own folder,
        # an object store in its bucket. ``storage_config`` is the one given to init()
        # (run.json keeps the config with its secrets masked).
        if storage_config is None:
            storage_config = (self.info.get("config") or {}).get("checkpoint_storage")
        self.storage = open_storage(storage_config, run_dir / "checkpoints")
        self.tensorboard_dir = run_dir / "tensorboard"
        # the rows of the checkpoints still stored, read once (see _apply_retention)
        self._stored_rows = self._read_rows()
        self.latest_checkpoint = self._stored_rows[-1]["uuid"] if self._stored_rows else None
        self._metrics_file = open(run_dir / "metrics.jsonl", "a") if writer else None  # noqa: SIM115
        self.created = False  # set by create(): this process made the run directory

    # --- creating and reopening runs ----------------------------------------------------

    @classmethod
    def create(
        cls,
        runs_dir: str | os.PathLike[str],
        *,
        hparams: Mapping[str, Any],
        seed: int,
        config: Mapping[str, Any],
        storage_config: Mapping[str, Any] | None = None,
    ) -> LocalSession:
        """A new run ``<runs_dir>/<n>`` with the next free number; its checkpoints in the
        storage ``storage_config`` names (default: the config's ``checkpoint_storage``)."""
        runs = Path(runs_dir)
        runs.mkdir(parents=True, exist_ok=True)
        run_id = max(_run_ids(runs), default=0) + 1
        while True:  # mkdir is atomic: two runs started at once get different ids
            try:
                (runs / str(run_id)).mkdir()
                break
            except FileExistsError:
                run_id += 1
        run_dir = runs / str(run_id)
        info = {
            "run_id": run_id,
            "created": time.time(),
            "seed": seed,
            "hparams": dict(hparams),
            "config": mask_config_secrets(config),  # never a secret on disk
        }
        _write_json_atomic(run_dir / "run.json", info)
        session = cls(run_dir, info, storage_config=storage_config
                      if storage_config is not None else config.get("checkpoint_storage"))
        session.created = True
        return session

    @classmethod
    def reopen(
        cls, runs_dir: str | os.PathLike[str], run_id: int | str, writer: bool = True,
        storage_config: Mapping[str, Any] | None = None,
    ) -> LocalSession:
        """An existing run, to resume it. ``run_id="latest"`` is the newest run.

        ``writer=False`` opens it read-only, for the other processes of a distributed run.
        ``storage_config``: the ``checkpoint_storage`` given to this process (with its
        secrets); by default the run's recorded one.
        """
        run_dir = resolve_run_dir(runs_dir, run_id)
        try:
            info = json.loads((run_dir / "run.json").read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise RunNotFoundError(
                f"run directory {run_dir} has no readable run.json: {err}"
            ) from None
        session = cls(run_dir, info, writer=writer, storage_config=storage_config)
        if writer:
            session._forget_metrics_after_checkpoint()
        return session

    # --- the Session interface ----------------------------------------------------------

    def report_metrics(
        self, group: MetricGroup, steps_completed: int, epoch: int, metrics: Mapping[str, float],
        *, stage: str = DEFAULT_STAGE, searched: bool = True,
    ) -> None:
        if self._metrics_file is None:
            raise StateError("this process opened the run read-only; rank 0 reports")
        check_metrics(group, metrics)  # the master's limits: what runs here runs there
        row = {
            "group": group,
            **record_fields(stage),
            "steps_completed": int(steps_completed),
            "epoch": int(epoch),
            "time": time.time(),
            "metrics": {k: float(v) for k, v in metrics.items()},
        }
        self._metrics_file.write(wire_dumps(row) + "\n")  # NaN as "NaN": standard JSON
        self._metrics_file.flush()

    def report_checkpoint(self, uuid: str, metadata: Mapping[str, Any], *,
                          stage: str = DEFAULT_STAGE, searched: bool = True) -> None:
        row = {"uuid": uuid, "time": time.time(), **record_fields(stage), **metadata}
        with open(self.run_dir / "checkpoints.jsonl", "a") as f:
            f.write(wire_dumps(row) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.latest_checkpoint = uuid
        self._stored_rows.append(row)
        self._apply_retention()

    def _apply_retention(self) -> None:
        """Delete the checkpoints the run's ``checkpoint_storage`` no longer keeps.

        As on the cluster: the ``save_trial_latest`` newest (never fewer than one:
        resume needs it) and the ``save_trial_best`` best by the searcher metric;
        defaults 1 and 1. ``checkpoints.jsonl`` keeps every row (a log); the
        directory goes, and readers skip rows without one.

        Per stage (det_sdk.stages): each stage keeps its own latest and best, so a
        finished stage's final checkpoint (what a resume restores it from) stays.

        The rows of the checkpoints still stored are kept in memory (read from
        ``checkpoints.jsonl`` once, when the session opens): reading the whole log
        back at every save cost time in proportion to the run's length.
        """
        storage = (self.info.get("config") or {}).get("checkpoint_storage") or {}
        latest = max(1, int(storage.get("save_trial_latest", 1)))
        best = int(storage.get("save_trial_best", 1))
        rows = self._stored_rows
        keep = kept_per_stage(rows, latest, best, *_searcher_metric_in(self.info))
        for r in [r for r in rows if r["uuid"] not in keep]:
            with contextlib.suppress(CheckpointNotFoundError):  # deleted before
                self.storage.delete(r["uuid"])
            rows.remove(r)
            # what `det runs list` counts for a bucket it has no credentials to list
            with open(self.run_dir / "deleted.jsonl", "a") as f:
                f.write(json.dumps({"uuid": r["uuid"], "time": time.time()}) + "\n")

    def discard_if_empty(self) -> bool:
        """Remove this run's directory if this process created it and it holds no
        checkpoint nor metric (a run stopped before training): no half-made run is left."""
        if not self.created or not self.writer or self._read_rows() \
                or _read_jsonl(self.run_dir / "metrics.jsonl"):
            return False
        self.close()
        shutil.rmtree(self.run_dir, ignore_errors=True)
        return True

    def checkpoint_for_trial(self, trial_id: int | str, best: bool = False,
                             stage: str | None = None) -> str:
        """The run's latest (``best``: best by the searcher metric) checkpoint of ``stage``;
        no stage given: of the stage the run checkpointed last."""
        run_dir = resolve_run_dir(self.runs_dir, trial_id)
        if run_dir.resolve() == self.run_dir.resolve():
            rows = self._read_rows()
        else:  # another run's: in its own folder, or in this run's store (the same bucket)
            stored = set(self.storage.list())
            rows = [r for r in _read_jsonl(run_dir / "checkpoints.jsonl")
                    if r.get("uuid") in stored or (run_dir / "checkpoints" / r["uuid"]).is_dir()]
        if not rows:
            raise CheckpointNotFoundError(f"local run {trial_id} ({run_dir}) has no checkpoint")
        stage = stage_of(rows[-1]) if stage is None else stage
        by_stage = group_by_stage(rows)
        if stage not in by_stage:
            raise CheckpointNotFoundError(
                f"local run {trial_id} has no checkpoint of stage {stage!r} (its stages: "
                f"{', '.join(by_stage)})")
        of_stage = by_stage[stage]
        if not best:
            return of_stage[-1]["uuid"]
        metric, smaller = _searcher_metric(run_dir)
        ranked = best_first(of_stage, metric, smaller)
        if not ranked:
            raise CheckpointNotFoundError(
                f"no checkpoint of local run {trial_id} recorded the metric {metric!r}"
            )
        return ranked[0]["uuid"]

    def stage_checkpoints(self) -> list[dict[str, Any]]:
        return self._read_rows()

    def checkpoint_path(self, uuid: str) -> Path:
        check_uuid(uuid)
        if self.storage.exists(uuid):
            return self.storage.path(uuid)
        # Any run of this runs directory may hold it: batch inference loads another run's.
        return find_runs_dir_checkpoint(self.runs_dir, uuid)

    def resume_hint(self) -> str:
        return (f"Resume with DET_RESUME={self.run_id} (or init(resume={self.run_id}); "
                f"a trial runner: --resume {self.run_id}).")

    def close(self) -> None:
        if self._metrics_file is not None and not self._metrics_file.closed:
            self._metrics_file.close()
        self.storage.close()

    # --- reading back -------------------------------------------------------------------

    def read_metrics(self) -> list[dict[str, Any]]:
        """Every metrics row of this run, oldest first."""
        if self._metrics_file is not None:
            self._metrics_file.flush()
        return _read_jsonl(self.run_dir / "metrics.jsonl")

    def read_checkpoints(self) -> list[dict[str, Any]]:
        """Every checkpoint row of this run still stored, oldest first."""
        return self._read_rows()

    def _read_rows(self) -> list[dict[str, Any]]:
        """The rows of ``checkpoints.jsonl`` whose checkpoint the storage lists (one
        listing: an object store answers it in one request)."""
        stored = set(self.storage.list())
        return [r for r in _read_jsonl(self.run_dir / "checkpoints.jsonl")
                if r.get("uuid") in stored]

    # --- internals ----------------------------------------------------------------------

    def _forget_metrics_after_checkpoint(self) -> None:
        """Drop metrics reported after the checkpoint we resume from.

        Training repeats those steps, and a run keeps one value per group and step.
        With stages: the stages before the checkpoint's are kept, later ones dropped.
        """
        rows = self._read_rows()
        path = self.run_dir / "metrics.jsonl"
        kept = forget_after(_read_jsonl(path), rows)
        if self._metrics_file is not None:
            self._metrics_file.close()
        write_atomic(path, "".join(wire_dumps(r) + "\n" for r in kept))
        self._metrics_file = open(path, "a")  # noqa: SIM115


def resolve_run_dir(runs_dir: str | os.PathLike[str], run_id: int | str) -> Path:
    """The directory of local run ``run_id`` (an int, its string, or ``"latest"``)."""
    runs = Path(runs_dir)
    if str(run_id) == "latest":
        ids = _run_ids(runs)
        if not ids:
            raise RunNotFoundError(f"no run to resume in {runs.resolve()}")
        return runs / str(max(ids))
    if not str(run_id).isdigit():
        raise RunNotFoundError(
            f"local run ids are numbers (the directories under {runs}); got {run_id!r}"
        )
    run_dir = runs / str(int(run_id))
    if not (run_dir / "run.json").is_file():
        known = ", ".join(str(i) for i in sorted(_run_ids(runs))) or "none"
        raise RunNotFoundError(f"no local run {run_id} in {runs.resolve()} (runs: {known})")
    return run_dir


def list_runs(runs_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """A summary row per local run: id, position reached, checkpoints, last validation.

    ``checkpoints`` counts those on disk for a run in its own folder. For a run whose
    checkpoints went to a bucket (``checkpoints_in``: its URL), listing it would need the
    credentials that ``run.json`` keeps masked: the count is the run's record (reported,
    less what its retention deleted), not a listing.
    """
    rows = []
    for run_id in sorted(_run_ids(Path(runs_dir))):
        run_dir = Path(runs_dir) / str(run_id)
        metrics = _read_jsonl(run_dir / "metrics.jsonl")
        last = metrics[-1] if metrics else {}
        vals = [m for m in metrics if m.get("group") == "validation"]
        bucket = _bucket_of(run_dir)
        if bucket is None:
            count = len(_read_checkpoint_rows(run_dir))
        else:
            deleted = {r.get("uuid") for r in _read_jsonl(run_dir / "deleted.jsonl")}
            count = len({r["uuid"] for r in _read_jsonl(run_dir / "checkpoints.jsonl")
                         if r.get("uuid") not in deleted})
        rows.append({
            "run_id": run_id,
            "epoch": last.get("epoch", 0),
            "steps_completed": last.get("steps_completed", 0),
            "checkpoints": count,
            "checkpoints_in": bucket,
            "last_validation": vals[-1]["metrics"] if vals else None,
        })
    return rows


def _bucket_of(run_dir: Path) -> str | None:
    """The URL of the bucket a run's checkpoints went to (None: its own folder). Read
    from ``run.json`` as written, not validated: its masked secrets would not pass."""
    try:
        info = json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError):
        return None
    raw = (info.get("config") or {}).get("checkpoint_storage") if isinstance(info, dict) else None
    if not isinstance(raw, Mapping):
        return None
    path = raw.get("host_path")
    if isinstance(path, str) and path.startswith(tuple(URL_TYPES)):
        return path.rstrip("/")
    scheme = next((u for u, kind in URL_TYPES.items() if kind == raw.get("type")), None)
    if scheme is None:
        return None
    location = raw.get("container" if raw.get("type") == "azure" else "bucket")
    return f"{scheme}{location}/{raw.get('prefix') or ''}".rstrip("/")


def find_runs_dir_checkpoint(runs_dir: str | os.PathLike[str], uuid: str) -> Path:
    """Path of checkpoint ``uuid`` in any run under ``runs_dir``."""
    check_uuid(uuid)
    for run_dir in sorted(Path(runs_dir).iterdir()) if Path(runs_dir).is_dir() else []:
        candidate = run_dir / "checkpoints" / uuid
        if candidate.is_dir():
            return candidate
    raise CheckpointNotFoundError(f"no checkpoint {uuid!r} in any run under {runs_dir}")


def _run_ids(runs: Path) -> list[int]:
    if not runs.is_dir():
        return []
    return [int(p.name) for p in runs.iterdir() if p.name.isdigit() and p.is_dir()]


def _searcher_metric(run_dir: Path) -> tuple[str, bool]:
    return _searcher_metric_in(json.loads((run_dir / "run.json").read_text()))


def _searcher_metric_in(info: Mapping[str, Any]) -> tuple[str, bool]:
    """The searcher's metric in a run's ``run.json`` content, and whether smaller is better."""
    searcher = (info.get("config") or {}).get("searcher") or {}
    return searcher.get("metric", "val_loss"), searcher.get("smaller_is_better", True)


def _read_checkpoint_rows(run_dir: Path) -> list[dict[str, Any]]:
    rows = _read_jsonl(run_dir / "checkpoints.jsonl")
    return [r for r in rows if (run_dir / "checkpoints" / r["uuid"]).is_dir()]


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    rows = []
    for line in lines:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a crash: the rows before it stand
        if isinstance(row, dict) and "metrics" in row:  # "NaN" (det_sdk.wire) is nan again
            row["metrics"] = decode_metrics(row["metrics"])
        rows.append(row)
    return rows


def _write_json_atomic(path: Path, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, indent=2, default=str) + "\n")


class MasterSession(Session):
    """A trial's (or job's) session with the master, over HTTP.

    Reports never hold up training: they go into a queue that a background thread
    delivers in order, retrying with backoff while the master is unreachable. The
    master keeps one value per (trial, group, step), so a report delivered twice
    after a retry counts once. ``close()`` waits for the queue to drain.
    Only the chief process (``writer=True``) reports and watches for preemption.
    """

    def __init__(self, info: Any, writer: bool = True, client: Any = None) -> None:
        from det_sdk.client import MasterClient

        self.info = info
        self.writer = writer
        self.trial_id = info.trial_id
        self.client = client or MasterClient(info.master_url, info.session_token)
        storage = (info.config.get("checkpoint_storage") or {}).get("host_path")
        self.storage = open_storage(info.config.get("checkpoint_storage"))
        self.latest_checkpoint = info.latest_checkpoint
        # TensorBoard event files go beside the checkpoints, in the trial's storage, where
        # `det tensorboard start EXP_ID` finds them (det_sdk.master.tensorboards.
        # tensorboard_dir).
        self.tensorboard_dir = (
            Path(storage) / "tensorboard" / str(info.experiment_id) / f"trial_{info.trial_id}"
            if storage and info.trial_id is not None else None)
        # The trial's working directory goes when the trial ends: what callbacks write
        # (ModelCheckpoint, CSVLogger) is kept beside the checkpoints instead.
        self.files_dir = (
            Path(storage) / "trial_files" / str(info.experiment_id) / f"trial_{info.trial_id}"
            if storage and info.trial_id is not None else None)
        self._queue: queue.Queue[tuple[str, Any] | None] = queue.Queue()
        self._preempt = threading.Event()
        self._closed = threading.Event()
        self._failures = 0
        self._refused: ReportRefusedError | None = None  # a report the master refused
        if writer:
            threading.Thread(target=self._deliver, daemon=True, name="det-reports").start()
            # The script may end right after fit: deliver what is queued before exit.
            atexit.register(self._close_at_exit)
            # a trial's pause or kill, and a job's (det job pause): the same long-poll
            threading.Thread(target=self._watch_preemption, daemon=True,
                             name="det-preemption").start()

    # --- reporting, off the training thread ------------------------------------------

    def report_metrics(
        self, group: MetricGroup, steps_completed: int, epoch: int, metrics: Mapping[str, float],
        *, stage: str = DEFAULT_STAGE, searched: bool = True,
    ) -> None:
        check_metrics(group, metrics)
        self._raise_refused()
        body = {"group": group, "steps_completed": int(steps_completed), "epoch": int(epoch),
                "metrics": _wire_metrics(metrics), **_stage_fields(stage, searched)}
        # a generic job has no trial: its metrics go to its allocation, kept per job
        self._queue.put(("metrics" if self.trial_id is not None else "job_metrics", body))

    def report_checkpoint(self, uuid: str, metadata: Mapping[str, Any], *,
                          stage: str = DEFAULT_STAGE, searched: bool = True) -> None:
        check_metrics("checkpoint", metadata.get("metrics") or {})
        self._raise_refused()
        body = {"uuid": uuid, "trial_id": self.trial_id,
                **{k: metadata[k] for k in ("steps_completed", "epoch", "batch", "size")
                   if k in metadata},
                "metrics": _wire_metrics(metadata.get("metrics") or {}),
                **_stage_fields(stage, searched)}
        self._queue.put(("checkpoint", body))
        self.latest_checkpoint = uuid

    def stage_checkpoints(self) -> list[dict[str, Any]]:
        if self.trial_id is None:
            return []
        rows = _retry(lambda: self.client.checkpoints(int(self.trial_id)))  # newest first
        return [{k: r[k] for k in ("uuid", "stage") if r.get(k) is not None}
                for r in sorted(rows, key=lambda r: r["created"])
                if not r.get("damaged")]  # failed verification on restore: never again

    def report_progress(self, fraction: float, *, searched: bool = True) -> None:
        # the trial's progress is its searched stage's (det_sdk.stages); the others have
        # lengths of their own
        if self.trial_id is not None and searched:
            self._queue.put(("progress", min(max(float(fraction), 0.0), 1.0)))

    def report_rows(self, rows_done: int, rows_total: int | None,
                    output: str | None = None) -> None:
        if self.info.task_type == "GENERIC":  # a trial's progress is its training's
            self._queue.put(("rows", {"rows_done": int(rows_done), "output": output,
                                      "rows_total": None if rows_total is None
                                      else int(rows_total)}))

    def _send(self, kind: str, body: Any) -> None:
        if kind == "rows":
            self.client.report_job_progress(self.info.allocation_id, body)
        elif kind == "metrics":
            self.client.report_metrics(self._trial(), body)
        elif kind == "job_metrics":
            self.client.request("POST", f"/api/v1/allocations/{self.info.allocation_id}/metrics",
                                json=body)
        elif kind == "checkpoint":
            self.client.report_checkpoint(body)
        elif kind == "progress":
            self.client.report_progress(self._trial(), body)

    def _deliver(self) -> None:
        """The report thread: it never dies. Each report is sent, retried while the
        master is unreachable (it may be restarting) or answers 5xx (a few times),
        and dropped with a log line when refused or when it cannot be sent at all;
        the reports after it go on."""
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                self._deliver_one(*item)
            except BaseException:  # even a bug here must not stop later reports
                log.exception("det_sdk: a %s report was lost", item[0])
            finally:
                self._queue.task_done()

    def _deliver_one(self, kind: str, body: Any) -> None:
        from det_sdk.client import MasterError

        delay, server_errors = 0.5, 0
        while True:
            try:
                self._send(kind, body)
                return
            except MasterError as err:
                if err.status in _INVALID_REPORT:  # what it carries cannot be stored
                    log.error("det_sdk: master refused a %s report: %s", kind, err)
                    self._refused = self._refused or ReportRefusedError(
                        f"the master refused a {kind} report as invalid (HTTP {err.status}): "
                        f"{err}; the trial fails rather than train on without its records")
                    return
                if err.status < 500:  # the trial's state or the token: retrying cannot help
                    log.warning("det_sdk: master refused a %s report: %s", kind, err)
                    return
                server_errors += 1
                if server_errors >= _SERVER_ERROR_RETRIES:
                    log.error("det_sdk: master failed a %s report %d times, dropped: %s",
                              kind, server_errors, err)
                    return
            except (ConnectionError, OSError):
                pass  # unreachable: retry until it is back
            except Exception as err:  # cannot be sent at all (e.g. not encodable)
                log.error("det_sdk: a %s report cannot be sent, dropped: %r", kind, err)
                return
            self._failures += 1
            time.sleep(delay)
            delay = min(delay * 2, 10.0)

    # --- instructions from the master -------------------------------------------------

    def _watch_preemption(self) -> None:
        while not self._closed.is_set() and not self._preempt.is_set():
            try:
                if self.client.preemption(self.info.allocation_id, timeout_seconds=20):
                    # The flag first: the training thread stops at its next batch, while
                    # the line below may wait on a full log pipe.
                    self._preempt.set()
                    # In the task's log: why a healthy trial (or job) is about to stop.
                    what = "trial" if self.info.task_type == "TRIAL" else "job"
                    print(f"det_sdk: the master asks this {what} to stop (a pause or a "
                          "preemption): it checkpoints and exits at its next stopping point",
                          file=sys.stderr, flush=True)
            except Exception:
                time.sleep(1.0)  # master away: keep training, ask again

    def should_preempt(self) -> bool:
        return self._preempt.is_set()

    def acknowledge_preemption(self) -> None:
        # Sent now, not queued: the exit that follows must find it recorded. Retried
        # while the master is away (restarting); never fatal (the stop goes on).
        try:
            _retry(lambda: self.client.acknowledge_preemption(self.info.allocation_id),
                   _WAIT_FOR_MASTER)
        except Exception as err:
            log.warning("det_sdk: could not tell the master this trial stops on its request: "
                        "%s", err)

    def _trial(self) -> int:
        """This task's trial on the master (callers have checked it has one: a generic
        job reports none of what needs it)."""
        if not isinstance(self.trial_id, int):
            raise StateError(f"this task has no trial on the master (trial {self.trial_id!r})")
        return self.trial_id

    def training_length(self) -> Length | None:
        if self.trial_id is None:
            return None
        op = _retry(lambda: self.client.searcher_operation(self._trial()), _WAIT_FOR_MASTER)
        if not op:
            return None
        return Length(**{op["unit"]: op["length"]})

    def complete_operation(self, length: Length, searcher_metric: float | None) -> Length | None:
        if self.trial_id is None or searcher_metric is None:
            return None
        # The searcher's answer decides what this process does next: wait for it
        # (retrying while the master is away, e.g. restarting).
        op = _retry(lambda: self.client.complete_operation(
            self._trial(), length.unit, length.value, searcher_metric), _WAIT_FOR_MASTER)
        if not op or op["completed"]:
            return None
        return Length(**{op["unit"]: op["length"]})

    # --- checkpoints of any trial (batch inference) ----------------------------------

    def checkpoint_for_trial(self, trial_id: int | str, best: bool = False,
                             stage: str | None = None) -> str:
        from det_sdk.client import MasterError

        try:
            return _retry(lambda: self.client.trial_checkpoint(int(trial_id), best=best,
                                                               stage=stage))["uuid"]
        except MasterError as err:
            raise CheckpointNotFoundError(str(err)) from None

    def checkpoint_path(self, uuid: str) -> Path:
        from det_sdk.client import MasterError

        check_uuid(uuid)
        try:
            return self.storage.path(uuid)
        except CheckpointNotFoundError:
            pass
        try:
            info = _retry(lambda: self.client.checkpoint(uuid))
        except MasterError as err:
            raise CheckpointNotFoundError(str(err)) from None
        if info.get("path") and Path(info["path"]).is_dir():
            return Path(info["path"])
        raise CheckpointNotFoundError(
            f"checkpoint {uuid} is not on this machine's storage ({info.get('path')})"
        )

    def close(self, timeout: float = 120.0) -> None:
        """Deliver what is queued (for up to ``timeout`` seconds), then stop; raise
        :class:`~det_sdk.errors.ReportRefusedError` if the master refused a report."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self.writer:
            deadline = time.monotonic() + timeout
            done = self._queue.all_tasks_done  # notified as the queue drains: no polling
            with done:
                while self._queue.unfinished_tasks and time.monotonic() < deadline:
                    done.wait(deadline - time.monotonic())
            self._queue.put(None)
        self._raise_refused()

    def _raise_refused(self) -> None:
        """Raise, in the training thread, the refusal the report thread met (once)."""
        refused, self._refused = self._refused, None
        if refused is not None:
            raise refused

    def _close_at_exit(self) -> None:
        """At interpreter exit (a script that never closed its context): an exception
        raised here would be printed and the exit status stay 0, so a refused report
        ends the process with status 1 itself."""
        try:
            self.close()
        except ReportRefusedError as err:
            print(f"det_sdk.errors.ReportRefusedError: {err}", file=sys.stderr, flush=True)
            os._exit(1)


# Retries (about 10 minutes) for the calls a trial cannot go on without.
_WAIT_FOR_MASTER = 64
# A report the master keeps failing with 5xx is dropped after this many tries.
_SERVER_ERROR_RETRIES = 5
# Answers that say the report itself cannot be stored (invalid, too large): the trial fails.
# Others (401, 403, 404, 409) are about the trial's state or the token, not the report.
_INVALID_REPORT = (400, 413, 422)


def _stage_fields(stage: str, searched: bool) -> dict[str, Any]:
    """What a report of ``stage`` carries to the master (none for the default stage,
    searched, so a report looks as before stages).

    >>> _stage_fields("fit", True), _stage_fields("teacher", False)
    ({}, {'stage': 'teacher', 'searched': False})
    """
    fields: dict[str, Any] = dict(record_fields(stage))
    if not searched:
        fields["searched"] = False
    return fields


def _wire_metrics(metrics: Mapping[str, Any]) -> dict[str, float | str]:
    """Metrics as JSON can carry them: NaN and infinities as the strings the master reads
    back as floats (``det_sdk.wire.encode_metric``); values that are not numbers are
    logged and left out.

    >>> _wire_metrics({"loss": float("nan"), "acc": 1})
    {'loss': 'NaN', 'acc': 1.0}
    """
    from det_sdk.wire import encode_metric

    out = {}
    for k, v in metrics.items():
        try:
            out[str(k)] = encode_metric(float(v))
        except (TypeError, ValueError):
            log.warning("det_sdk: metric %r is not a number (%r); not reported", k, v)
    return out


def _retry(call: Any, attempts: int = 8) -> Any:
    """A synchronous call the process cannot go on without: retry while unreachable."""
    delay = 0.5
    for i in range(attempts):
        try:
            return call()
        except (ConnectionError, OSError):
            if i == attempts - 1:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 10.0)
    return None
