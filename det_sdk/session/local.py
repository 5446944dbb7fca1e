"""A local run directory: :class:`LocalSession`, the session of a run off the cluster
(the layout: det_sdk.session)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from det_sdk.atomic import write_atomic
from det_sdk.config.storage import mask_config_secrets
from det_sdk.errors import StateError
from det_sdk.session.base import MetricGroup, RunNotFoundError, Session
from det_sdk.session.runs import (
    find_runs_dir_checkpoint,
    read_jsonl,
    resolve_run_dir,
    run_ids,
    searcher_metric,
    searcher_metric_in,
    write_json_atomic,
)
from det_sdk.stages import (
    DEFAULT_STAGE,
    forget_after,
    group_by_stage,
    kept_per_stage,
    record_fields,
    stage_of,
)
from det_sdk.storage import CheckpointNotFoundError, best_first, check_uuid, open_storage
from det_sdk.wire import check_metrics
from det_sdk.wire import dumps as wire_dumps

__all__ = ["LocalSession"]


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
        run_id = max(run_ids(runs), default=0) + 1
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
        write_json_atomic(run_dir / "run.json", info)
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
        keep = kept_per_stage(rows, latest, best, *searcher_metric_in(self.info))
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
                or read_jsonl(self.run_dir / "metrics.jsonl"):
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
            rows = [r for r in read_jsonl(run_dir / "checkpoints.jsonl")
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
        metric, smaller = searcher_metric(run_dir)
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

    def report_system_metrics(self, records: list[dict[str, Any]]) -> None:
        if self._metrics_file is None:
            return  # the other processes of a run: rank 0 reports
        # system.jsonl beside metrics.jsonl, one record a line (det_sdk.profiler's shape);
        # appended in one write, so a reader never sees half a report
        with open(self.run_dir / "system.jsonl", "a") as out:
            out.write("".join(wire_dumps(r) + "\n" for r in records))

    def close(self) -> None:
        self.stop_profiler()
        if self._metrics_file is not None and not self._metrics_file.closed:
            self._metrics_file.close()
        self.storage.close()

    # --- reading back -------------------------------------------------------------------

    def read_metrics(self) -> list[dict[str, Any]]:
        """Every metrics row of this run, oldest first."""
        if self._metrics_file is not None:
            self._metrics_file.flush()
        return read_jsonl(self.run_dir / "metrics.jsonl")

    def read_checkpoints(self) -> list[dict[str, Any]]:
        """Every checkpoint row of this run still stored, oldest first."""
        return self._read_rows()

    def _read_rows(self) -> list[dict[str, Any]]:
        """The rows of ``checkpoints.jsonl`` whose checkpoint the storage lists (one
        listing: an object store answers it in one request)."""
        stored = set(self.storage.list())
        return [r for r in read_jsonl(self.run_dir / "checkpoints.jsonl")
                if r.get("uuid") in stored]

    # --- internals ----------------------------------------------------------------------

    def _forget_metrics_after_checkpoint(self) -> None:
        """Drop metrics reported after the checkpoint we resume from.

        Training repeats those steps, and a run keeps one value per group and step.
        With stages: the stages before the checkpoint's are kept, later ones dropped.
        """
        rows = self._read_rows()
        path = self.run_dir / "metrics.jsonl"
        kept = forget_after(read_jsonl(path), rows)
        if self._metrics_file is not None:
            self._metrics_file.close()
        write_atomic(path, "".join(wire_dumps(r) + "\n" for r in kept))
        self._metrics_file = open(path, "a")  # noqa: SIM115
