"""Checkpoint storage: the core API's ``core_context.checkpoint``.

A checkpoint is a directory in the session's storage (the local run's
``checkpoints/`` or the cluster's ``checkpoint_storage``), written under a temporary
name and renamed into place, then reported (so the master lists it and applies
retention). Keras checkpoints written by ``DeterminedCallback`` are det_sdk's own
format; any other files can be stored the same way::

    with core_context.checkpoint.store_path({"steps_completed": 100}) as (path, uuid):
        (path / "weights.npz").write_bytes(...)
    with core_context.checkpoint.restore_path(uuid) as path:
        ...
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from det_sdk.arrayfile import copy_file
from det_sdk.distributed import Processes
from det_sdk.errors import ArgumentTypeError, StateError, UsageError
from det_sdk.session import Session
from det_sdk.stages import DEFAULT_STAGE
from det_sdk.storage import OWNER_FILE, CheckpointStorage, folder_size

__all__ = ["CheckpointContext"]

METADATA = "metadata.json"


class CheckpointContext:
    """Store, find and read checkpoints through the session's storage."""

    def __init__(self, session: Session, distributed: Processes) -> None:
        self._session = session
        self._dist = distributed

    @contextlib.contextmanager
    def store_path(self, metadata: Mapping[str, Any],
                   shard: bool = False) -> Iterator[tuple[Path, str]]:
        """A directory to fill; on leaving the block it becomes checkpoint ``uuid``.

        ``metadata`` (JSON) must hold ``steps_completed``; it is written to
        ``metadata.json`` and reported with the checkpoint. The chief stores; with
        ``shard=True`` the other processes get a scratch directory that is discarded
        (det_sdk keeps the chief's files only: a shared filesystem needs no merge).

        >>> with ctx.store_path({"steps_completed": 10}) as (path, uuid):  # doctest: +SKIP
        ...     (path / "w.npy").write_bytes(b"...")
        """
        meta = _checked_metadata(metadata)
        if not self._dist.is_chief:
            if not shard:
                raise StateError(
                    "store_path: only the chief (rank 0) stores checkpoints; call it on "
                    "rank 0, or with shard=True on every rank")
            import tempfile

            with tempfile.TemporaryDirectory(prefix="det-shard-") as tmp:
                yield Path(tmp), ""
            return
        with self._session.storage.store() as (uuid, path):
            yield path, uuid
            if not (path / METADATA).exists():
                (path / METADATA).write_text(json.dumps(meta, default=str))
            size = folder_size(path)
        self._report(uuid, meta, size)

    def upload(self, ckpt_dir: str | os.PathLike[str], metadata: Mapping[str, Any],
               shard: bool = False) -> str:
        """Copy a local directory into storage as a new checkpoint; its uuid.

        >>> uuid = ctx.upload("out/", {"steps_completed": 10})  # doctest: +SKIP
        """
        src = Path(ckpt_dir)
        if not src.is_dir():
            raise UsageError(f"upload: ckpt_dir {src} is not a directory")
        with self.store_path(metadata, shard=shard) as (path, uuid):
            if self._dist.is_chief:
                shutil.copytree(src, path, dirs_exist_ok=True, copy_function=copy_file)
        return uuid

    @contextlib.contextmanager
    def restore_path(self, storage_id: str) -> Iterator[Path]:
        """The directory of checkpoint ``storage_id`` (on the shared storage: no copy).

        >>> with ctx.restore_path(info.latest_checkpoint) as path:  # doctest: +SKIP
        ...     model.load_weights(path / "w.h5")
        """
        yield self._session.checkpoint_path(storage_id)

    def download(self, storage_id: str, ckpt_dir: str | os.PathLike[str]) -> None:
        """Copy checkpoint ``storage_id`` into the local directory ``ckpt_dir`` (from an
        object store: each file verified against the checkpoint's manifest)."""
        storage = self._session.storage
        if storage.exists(storage_id):
            storage.download(storage_id, ckpt_dir)
            return
        src = self._session.checkpoint_path(storage_id)  # another run's (local runs)
        # the owner file is the master's bookkeeping (det_sdk.storage), not the user's
        shutil.copytree(src, Path(ckpt_dir), dirs_exist_ok=True, copy_function=copy_file,
                        ignore=lambda d, names: [OWNER_FILE] if Path(d) == src else [])

    def select(self, trial_id: int | str | None = None, *, best: bool = False,
               stage: str | None = None) -> str:
        """The uuid of a trial's latest checkpoint (``best``: best by the searcher metric);
        this trial's (this local run's) when ``trial_id`` is None; of ``stage`` (a
        ``context.fit`` of the script, det_sdk.stages) when given. Determined's SDK has
        it as ``Trial.select_checkpoint(latest=True / best=True)``.

        >>> uuid = ctx.select(best=True)  # doctest: +SKIP
        """
        trial = self._session.trial_id if trial_id is None else trial_id
        if trial is None:
            raise UsageError("checkpoint.select: this process has no trial; give trial_id")
        return self._session.checkpoint_for_trial(trial, best=best, stage=stage)

    def get_metadata(self, storage_id: str) -> dict[str, Any]:
        """The checkpoint's ``metadata.json`` ({} when it has none)."""
        path = self._session.checkpoint_path(storage_id) / METADATA
        return json.loads(path.read_text()) if path.is_file() else {}

    # --- det_sdk extensions: what the fronts need beyond Determined's core API ----------

    @property
    def storage(self) -> CheckpointStorage:
        """det_sdk extension: the storage the checkpoints go to (a streamed predict into
        the same bucket uses its client and credentials)."""
        return self._session.storage

    def checkpoint_path(self, storage_id: str) -> Path:
        """det_sdk extension: the directory of checkpoint ``storage_id`` as a path (what
        :meth:`restore_path` yields), for code that reads it outside a ``with`` block;
        any run of the local runs directory may hold it."""
        return self._session.checkpoint_path(storage_id)

    @property
    def latest_checkpoint(self) -> str | None:
        """det_sdk extension: the uuid of this trial's latest checkpoint as of now (the
        one resumed from, then each one reported since); None before the first."""
        return self._session.latest_checkpoint

    def stage_checkpoints(self) -> list[dict[str, Any]]:
        """det_sdk extension: this trial's checkpoint records oldest first (``uuid``, and
        ``stage`` but for the default stage): which stages (det_sdk.stages) a resume
        reached, and where. Read by the chief."""
        return self._session.stage_checkpoints()

    def write_staged(self, storage_id: str, fill: Callable[[Path], Mapping[str, Any]], *,
                     stage: str = DEFAULT_STAGE, searched: bool = True) -> Callable[[], None]:
        """det_sdk extension: checkpoint ``storage_id`` in two steps, for a background writer
        that fills the next checkpoint while this one is stored. ``fill(path)`` writes its
        files into a local directory and returns the record to report
        (:meth:`report_checkpoint`); if it raises, nothing is left. Returns what stores the
        checkpoint (an upload to a bucket) and then reports it.

        >>> publish = ctx.write_staged(uuid, fill)  # doctest: +SKIP
        >>> publish()  # doctest: +SKIP
        """
        staged = self._session.storage.stage(storage_id)
        try:
            record = fill(staged.path)
        except BaseException:
            staged.discard()
            raise

        def publish() -> None:
            staged.publish()
            self.report_checkpoint(storage_id, record, stage=stage, searched=searched)
        return publish

    def report_checkpoint(self, storage_id: str, record: Mapping[str, Any], *,
                          stage: str = DEFAULT_STAGE, searched: bool = True) -> None:
        """det_sdk extension: report checkpoint ``storage_id``, stored with
        :meth:`write_staged`: ``record`` holds its ``steps_completed``, ``epoch``,
        ``batch``, ``size`` and ``metrics``; ``stage`` and ``searched`` say which stage
        (det_sdk.stages) it belongs to. The chief reports."""
        self._session.report_checkpoint(storage_id, record, stage=stage, searched=searched)

    def _report(self, uuid: str, meta: Mapping[str, Any], size: int) -> None:
        record = {k: meta[k] for k in ("steps_completed", "epoch", "batch") if k in meta}
        record.setdefault("epoch", 0)
        record.setdefault("batch", 0)
        self._session.report_checkpoint(uuid, {**record, "size": size,
                                               "metrics": dict(meta.get("metrics") or {})})


def _checked_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(metadata, Mapping):
        raise ArgumentTypeError("store_path: metadata must be a mapping, got "
                                f"{type(metadata).__name__}")
    steps = metadata.get("steps_completed")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise UsageError("store_path: metadata needs 'steps_completed' (an int >= 0), got "
                         f"{steps!r}")
    try:
        json.dumps(dict(metadata))
    except (TypeError, ValueError) as err:
        raise UsageError(f"store_path: metadata must be JSON: {err}") from None
    return dict(metadata)
