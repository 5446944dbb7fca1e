"""Local run directories read back: which runs there are, their checkpoints and metrics
(``det runs list``, a resume, another run's checkpoint); the layout is
det_sdk.session's."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from det_sdk.atomic import write_atomic
from det_sdk.config.storage import URL_TYPES
from det_sdk.session.base import RunNotFoundError
from det_sdk.storage import CheckpointNotFoundError, check_uuid
from det_sdk.wire import decode_metrics

__all__ = ["find_runs_dir_checkpoint", "list_runs", "read_jsonl", "resolve_run_dir", "run_ids",
           "searcher_metric", "searcher_metric_in", "write_json_atomic"]


def resolve_run_dir(runs_dir: str | os.PathLike[str], run_id: int | str) -> Path:
    """The directory of local run ``run_id`` (an int, its string, or ``"latest"``)."""
    runs = Path(runs_dir)
    if str(run_id) == "latest":
        ids = run_ids(runs)
        if not ids:
            raise RunNotFoundError(f"no run to resume in {runs.resolve()}")
        return runs / str(max(ids))
    if not str(run_id).isdigit():
        raise RunNotFoundError(
            f"local run ids are numbers (the directories under {runs}); got {run_id!r}"
        )
    run_dir = runs / str(int(run_id))
    if not (run_dir / "run.json").is_file():
        known = ", ".join(str(i) for i in sorted(run_ids(runs))) or "none"
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
    for run_id in sorted(run_ids(Path(runs_dir))):
        run_dir = Path(runs_dir) / str(run_id)
        metrics = read_jsonl(run_dir / "metrics.jsonl")
        last = metrics[-1] if metrics else {}
        vals = [m for m in metrics if m.get("group") == "validation"]
        bucket = _bucket_of(run_dir)
        if bucket is None:
            count = len(_read_checkpoint_rows(run_dir))
        else:
            deleted = {r.get("uuid") for r in read_jsonl(run_dir / "deleted.jsonl")}
            count = len({r["uuid"] for r in read_jsonl(run_dir / "checkpoints.jsonl")
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


def run_ids(runs: Path) -> list[int]:
    """The ids of the runs under ``runs`` (their numbered directories)."""
    if not runs.is_dir():
        return []
    return [int(p.name) for p in runs.iterdir() if p.name.isdigit() and p.is_dir()]


def searcher_metric(run_dir: Path) -> tuple[str, bool]:
    """The searcher's metric of the run in ``run_dir``, and whether smaller is better."""
    return searcher_metric_in(json.loads((run_dir / "run.json").read_text()))


def searcher_metric_in(info: Mapping[str, Any]) -> tuple[str, bool]:
    """The searcher's metric in a run's ``run.json`` content, and whether smaller is better."""
    searcher = (info.get("config") or {}).get("searcher") or {}
    return searcher.get("metric", "val_loss"), searcher.get("smaller_is_better", True)


def _read_checkpoint_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The rows of ``checkpoints.jsonl`` whose checkpoint is in the run's own folder."""
    rows = read_jsonl(run_dir / "checkpoints.jsonl")
    return [r for r in rows if (run_dir / "checkpoints" / r["uuid"]).is_dir()]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The rows of a ``.jsonl`` file (none when absent; a line cut short passed over)."""
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


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as ``path``'s JSON, whole or not at all."""
    write_atomic(path, json.dumps(obj, indent=2, default=str) + "\n")
