"""Checkpoint bookkeeping: registration (a uuid belongs to its first trial), retention,
lookups, and the sweep of checkpoint directories that nothing recorded.

Checkpoint files are written by trials (``det_sdk.storage``) under the experiment's
storage directory, one directory per uuid; the master only records them, deletes
those the retention policy drops, and removes directories left behind by a trial
that died between writing a checkpoint and reporting it.

A storage directory (``host_path``) may be shared: by masters (one per user, as the
README recommends), by local runs, by other files. The master therefore deletes a
directory only if it is named like a uuid and its owner file
(:data:`det_sdk.storage.OWNER_FILE`, written by the task that saved it) names one of
this master's own allocations, of the trial concerned: a marker, not a per-master
prefix, so that checkpoint paths stay ``<host_path>/<uuid>``. Directories without
one (local runs, checkpoints saved before det_sdk wrote owner files) are never
deleted by a master.

Deleting a checkpoint of 20,000 files takes seconds: under the lifecycle lock it would
stall every route that takes the lock (issue 46). Under the lock a dropped directory is
only renamed to ``.<uuid>.deleting`` (one rename: from then on no report can see or
claim it); :meth:`Checkpoints.empty_trash` deletes the renamed ones after the lock is
released, and a master starting again deletes what a crash left renamed.

>>> is_checkpoint_name("0f5b6a1e-6bb4-4c37-9c43-5e0c3a3c2b11"), is_checkpoint_name("data")
(True, False)
"""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

from det_sdk.config import CheckpointStorageConfig, ExperimentConfig
from det_sdk.failure import Failure
from det_sdk.master.errors import Conflict, InvalidRequest, NotFound
from det_sdk.master.lifecycle import Lifecycle, TrialEvent
from det_sdk.master.models import registered_checkpoints
from det_sdk.master.rows import CheckpointRow
from det_sdk.master.store import Store
from det_sdk.stages import kept_per_stage, stage_of
from det_sdk.storage import (
    CheckpointStorage,
    best_first,
    open_storage,
    read_owner,
    remove_tree,
    retire_dir,
)

__all__ = ["Checkpoints", "is_checkpoint_name"]

log = logging.getLogger("det_sdk.master.checkpoints")

# Only directories named like the uuids det_sdk.storage writes are ever swept: a
# host_path shared with other files loses nothing else.
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_UUID_IN_TEXT = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_NOTE_LINES = 5
_TRASH = re.compile(r"^\.([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
                    r"\.deleting$")


def _searched(row: CheckpointRow) -> bool:
    """Whether a checkpoint is of the searched stage (a record before stages is)."""
    return row.get("searched") is None or bool(row.get("searched"))


def is_checkpoint_name(name: str) -> bool:
    """Whether a directory name is one a checkpoint save creates (a uuid4)."""
    return bool(_UUID.match(name))


class Checkpoints:
    """The master's checkpoint records and the files they stand for."""

    def __init__(self, store: Store, lifecycle: Lifecycle, data_dir: Path,
                 config_of: Callable[[int], ExperimentConfig]) -> None:
        self.store = store
        self.lifecycle = lifecycle
        self.data_dir = data_dir
        self.config_of = config_of  # trial id -> its experiment config
        # retired under the lock (unlisted at once), their files deleted after it
        self._trash: builtins.list[Callable[[], object]] = []
        self._trash_lock = threading.Lock()
        self._storages: dict[str, CheckpointStorage] = {}  # by their config (storage())
        self._locations: dict[str | None, str] = {}  # location()'s, by stored config
        # the sweep of object stores runs in a thread of its own, one at a time: a
        # listing is a request, which must hold neither the lock nor the disk thread
        self._bucket_sweep_lock = threading.Lock()
        self._bucket_sweep: threading.Thread | None = None
        self._buckets_to_sweep: dict[int, CheckpointStorage] = {}

    def directory(self, config: ExperimentConfig) -> Path:
        """Where an experiment's checkpoints go (``host_path``, else the data directory)."""
        host_path = config.checkpoint_storage.host_path
        return Path(host_path) if host_path else self.data_dir / "checkpoints"

    def storage(self, config: ExperimentConfig) -> CheckpointStorage:
        """The store an experiment's checkpoints are in (its ``checkpoint_storage``: a
        folder, :meth:`directory`, or an object store's bucket)."""
        return self._open(config.checkpoint_storage)

    def location(self, stored: str | None) -> str:
        """Where the checkpoints of an experiment whose ``checkpoint_storage`` the database
        holds as ``stored`` (JSON text) are (:meth:`path_of` without a uuid): parsed once
        per distinct value, so that a page of checkpoints costs no query or parse a row."""
        where = self._locations.get(stored)
        if where is None:
            cfg = CheckpointStorageConfig.model_validate(json.loads(stored or "{}"))
            where = self._locations[stored] = self._open(cfg).describe()
        return where

    def _open(self, cfg: CheckpointStorageConfig) -> CheckpointStorage:
        # for_trials keeps a shared folder's host_path, else this master's (as directory())
        given = cfg.for_trials(self.data_dir / "checkpoints")
        key = json.dumps(given, sort_keys=True)
        storage = self._storages.get(key)
        if storage is None:  # one client per store, not one per call (listings call often)
            storage = self._storages[key] = open_storage(given, owner={})
        return storage

    # --- registering ------------------------------------------------------------------------

    def report(self, report: dict[str, Any]) -> None:
        """A trial wrote a checkpoint: record it, then apply the retention policy.

        Refused (:class:`Conflict`) if the uuid is another trial's, or names a
        directory that no task of this trial wrote (its owner file): a task token
        cannot take over (and so delete) a checkpoint it did not write. The uuid is a
        canonical lowercase UUID (:class:`InvalidRequest` otherwise).

        The files retention drops are deleted after the lock is released, before this
        returns: call it off the event loop (the route is a plain ``def``).
        """
        try:
            self._report(report)
        finally:
            self.empty_trash()

    def _report(self, report: dict[str, Any]) -> None:
        trial_id = report["trial_id"]
        with self.lifecycle.lock:
            self.lifecycle.trial_event(trial_id, TrialEvent.CHECKPOINTED)
            if not is_checkpoint_name(report["uuid"]):  # the API checks it; callers too
                raise InvalidRequest(f"uuid: {report['uuid']!r} is not a canonical lowercase "
                                     "UUID (8-4-4-4-12 hex digits)")
            known = self.store.checkpoint(report["uuid"])
            storage = self.storage(self.config_of(trial_id))
            if known is None and storage.exists(report["uuid"]) and not self._owned(
                    storage.read_owner(report["uuid"]), trial_id):
                raise Conflict(f"checkpoint directory {storage.describe()}/{report['uuid']} "
                               f"was not written by trial {trial_id} of this master")
            owner = self.store.put_checkpoint(report)
            if owner != trial_id:
                raise Conflict(f"checkpoint {report['uuid']} belongs to trial {owner}, "
                               f"not to trial {trial_id}")
            latest = self._latest_row(trial_id)
            # the trial shows the Keras backend its latest checkpoint was trained on
            self.store.update_trial(
                trial_id, latest_checkpoint=latest["uuid"] if latest else None,
                keras_backend=latest.get("keras_backend") if latest else None)
            self._apply_retention(trial_id)

    def _latest(self, trial_id: int) -> str | None:
        """The trial's newest intact checkpoint (stages count steps from 0 each: by time)."""
        latest = self._latest_row(trial_id)
        return latest["uuid"] if latest else None

    def _latest_row(self, trial_id: int) -> CheckpointRow | None:
        rows = self.intact(trial_id)
        return max(rows, key=lambda r: r["created"]) if rows else None

    def intact(self, trial_id: int) -> list[CheckpointRow]:
        """The trial's checkpoints that no restore found damaged: those it may resume from."""
        return [r for r in self.store.checkpoints(trial_id) if not r.get("damaged")]

    # --- damaged checkpoints ----------------------------------------------------------------

    def damaged_on_restore(self, trial_id: int, failure: Failure | None) -> str | None:
        """Mark the trial's checkpoint that ``failure`` (its task's root cause) found
        damaged, and point the trial at its newest intact one; the note to log, or None.

        A process that restores a checkpoint whose files fail verification raises
        :class:`~det_sdk.errors.CheckpointCorruptError` naming the checkpoint's
        directory (``<storage>/<uuid>``); the rank's failure record carries it here.
        Only the trial's own intact checkpoints named in the message are marked: a
        damaged checkpoint is never handed to the trial again, so a restart resumes
        from the one before it (or from the start when none is left), not from the
        same damaged one until ``max_restarts`` runs out.
        """
        if failure is None or not failure.type.endswith("CheckpointCorruptError"):
            return None
        named = set(_UUID_IN_TEXT.findall(failure.message))
        hit = [r["uuid"] for r in self.intact(trial_id) if r["uuid"] in named]
        if not hit:
            return None
        reason = failure.message.strip().splitlines()[0][:500]
        with self.lifecycle.lock:
            for uuid in hit:
                self.store.mark_checkpoint_damaged(uuid, reason)
            latest = self._latest(trial_id)
            self.store.update_trial(trial_id, latest_checkpoint=latest)
        then = (f"a restart resumes from checkpoint {latest}, the newest intact one"
                if latest else "no intact checkpoint is left: a restart begins from the start")
        note = (f"checkpoint {', '.join(hit)} failed verification on restore ({reason}); "
                f"marked damaged, never restored again; {then}")
        t = self.store.trial(trial_id)
        before = (t["checkpoint_note"] if t else None) or ""
        # bounded: one line per damaged checkpoint, the latest few
        lines = [*before.splitlines(), note][-_NOTE_LINES:]
        self.store.update_trial(trial_id, checkpoint_note="\n".join(lines))
        log.warning("trial %d: %s", trial_id, note)
        return note

    def _apply_retention(self, trial_id: int) -> None:
        """Delete the trial's checkpoints (files, then records) the policy no longer keeps.

        Kept: the ``save_trial_latest`` newest (never fewer than one: a paused or
        restarting trial resumes from it), the ``save_trial_best`` best by the
        searcher metric, and any among the experiment's ``save_experiment_best``
        (ranked by :func:`det_sdk.wire.metric_rank`: NaN and infinities last), and
        every checkpoint a model version of the registry points at.
        Latest and best are kept per stage of the script (det_sdk.stages): a finished
        stage's final checkpoint, which a restart restores the stage from, stays.
        """
        cfg = self.config_of(trial_id)
        policy = cfg.checkpoint_storage
        metric, smaller = cfg.searcher_metric
        # damaged ones neither count as kept latest/best nor go: kept for inspection
        rows = self.intact(trial_id)
        keep = kept_per_stage(rows, policy.save_trial_latest, policy.save_trial_best,
                              metric, smaller)
        if policy.save_experiment_best:
            t = self.store.trial(trial_id)
            assert t is not None  # the trial is reporting a checkpoint
            everyone = [c for other in self.store.trials(t["experiment_id"])
                        for c in self.intact(other["id"]) if _searched(c)]
            ranked = best_first(everyone, metric, smaller)
            keep |= {r["uuid"] for r in ranked[:policy.save_experiment_best]}
        keep |= registered_checkpoints(self.store)  # a model version's checkpoint stays
        storage = self.storage(cfg)
        for r in rows:
            if r["uuid"] not in keep:
                self._delete_files(storage, r["uuid"], trial_id)
                self.store.delete_checkpoint(r["uuid"])

    def _written_by(self, path: Path, trial_id: int | None = None) -> bool:
        """Whether checkpoint directory ``path`` was saved by a task of this master (of
        trial ``trial_id`` if given), as its owner file says."""
        return self._owned(read_owner(path), trial_id)

    def _owned(self, owner: dict[str, Any] | None, trial_id: int | None = None) -> bool:
        """Whether an owner record names a task of this master (of ``trial_id`` if
        given): masters sharing a storage never delete each other's checkpoints."""
        alloc_id = owner.get("allocation_id") if owner else None
        alloc = self.store.allocation(alloc_id) if isinstance(alloc_id, str) else None
        if alloc is None or alloc["trial_id"] is None:
            return False
        return trial_id is None or alloc["trial_id"] == trial_id

    def delete(self, rows: Iterable[CheckpointRow]) -> builtins.list[str]:
        """Delete recorded checkpoints ``rows``: under the lock their files are retired
        (out of every listing) and their records deleted, after it the files go. Returns
        where each one's files were (``det checkpoint delete``, ``det e delete``)."""
        where = []
        with self.lifecycle.lock:
            for row in rows:
                storage = self.storage(self.config_of(row["trial_id"]))
                if storage.exists(row["uuid"]):
                    where.append(f"{storage.describe()}/{row['uuid']}")
                self._delete_files(storage, row["uuid"], row["trial_id"])
                self.store.delete_checkpoint(row["uuid"])
        self.empty_trash()
        return where

    def _delete_files(self, storage: CheckpointStorage, uuid: str, trial_id: int) -> None:
        """Delete a dropped checkpoint's files (a folder, or an object store's objects) if
        it is one of ``trial_id``'s (uuid-named, written by its task); anything else
        stays, logged."""
        if not is_checkpoint_name(uuid) or not storage.exists(uuid):
            return
        if self._owned(storage.read_owner(uuid), trial_id):
            try:
                finish = storage.retire(uuid)
            except (OSError, LookupError) as err:  # gone meanwhile, or the store away
                log.warning("could not delete checkpoint %s/%s: %s", storage.describe(),
                            uuid, err)
                return
            with self._trash_lock:
                self._trash.append(finish)
        else:
            log.warning("kept %s/%s: not a checkpoint directory written by trial %d of this "
                        "master (its record is dropped)", storage.describe(), uuid, trial_id)

    def _to_trash(self, path: Path) -> None:
        """Retire checkpoint directory ``path`` for :meth:`empty_trash` (under the lock)."""
        try:
            finish = retire_dir(path)
        except OSError as err:
            log.warning("could not delete %s: %s", path, err)
            return
        with self._trash_lock:
            self._trash.append(finish)

    def sweep_unrecorded_objects_soon(self, storages: Iterable[CheckpointStorage],
                                      idle: Callable[[CheckpointStorage], bool]) -> None:
        """Sweep, in a thread of its own, the object stores among ``storages``: the
        checkpoints stored whole there that this master's trials wrote and no record
        names (a trial killed between its manifest and its report), as
        :meth:`sweep_unrecorded` does for folders. ``idle(storage)``, asked under the
        lifecycle lock, says that no trial writing there runs (its report may still be
        on the way); a storage that is busy then is left for the next sweep."""
        from det_sdk.storage import SharedFSStorage

        with self._bucket_sweep_lock:
            for storage in storages:
                if not isinstance(storage, SharedFSStorage):  # folders: sweep_unrecorded
                    self._buckets_to_sweep[id(storage)] = storage
            if not self._buckets_to_sweep or self._bucket_sweep is not None:
                return  # nothing to do, or the running sweep takes these up after its own
            self._bucket_sweep = threading.Thread(target=self._sweep_buckets, args=(idle,),
                                                  daemon=True, name="bucket-sweep")
            self._bucket_sweep.start()

    def _sweep_buckets(self, idle: Callable[[CheckpointStorage], bool]) -> None:
        while True:
            with self._bucket_sweep_lock:
                if not self._buckets_to_sweep:
                    self._bucket_sweep = None
                    return
                storages = list(self._buckets_to_sweep.values())
                self._buckets_to_sweep.clear()
            for storage in storages:
                try:
                    # what a killed save or removal (this master's own, before a
                    # restart) left unlisted, then what is listed and no record names
                    storage.sweep_abandoned()
                    self.sweep_unrecorded_objects(storage, idle)
                except Exception:  # the store away, a bad answer: logged, the next sweep tries
                    log.exception("could not sweep %s", storage.describe())

    def sweep_unrecorded_objects(self, storage: CheckpointStorage,
                                 idle: Callable[[CheckpointStorage], bool]) -> builtins.list[str]:
        """Delete the checkpoints in object store ``storage`` that a trial of this master
        wrote and no record names; returns their uuids. The listing and the owner records
        are read without the lock; under it, the storage must still be ``idle`` and each
        checkpoint still unrecorded; the objects go after it."""
        recorded = {c["uuid"] for c in self.store.checkpoints()}
        unrecorded = [u for u in storage.list() if is_checkpoint_name(u) and u not in recorded]
        orphans = [u for u in unrecorded if self._owned(storage.read_owner(u))]
        if not orphans:
            return []
        gone = []
        with self.lifecycle.lock:
            if not idle(storage):
                return []
            recorded = {c["uuid"] for c in self.store.checkpoints()}
            for uuid in orphans:
                if uuid not in recorded:
                    with self._trash_lock:
                        self._trash.append(storage.retire(uuid))
                    gone.append(uuid)
        self.empty_trash()
        if gone:
            log.info("deleted %d unrecorded checkpoints in %s", len(gone), storage.describe())
        return gone

    def empty_trash(self) -> int:
        """Delete what was retired (renamed out of sight, or an object store's unlisted
        checkpoints); call it without the lifecycle lock (it may take seconds). Returns
        how many went."""
        with self._trash_lock:
            trash, self._trash = self._trash, []
        for finish in trash:
            try:
                finish()
            except (OSError, LookupError) as err:  # the store away: logged, not raised
                log.warning("could not delete a retired checkpoint: %s", err)
        return len(trash)

    # --- reading ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def restore(self, uuid: str) -> Iterator[Path]:
        """A local directory with recorded checkpoint ``uuid``'s files for the block (an
        object store's: downloaded and verified, removed after). NotFound if it is not
        recorded; :class:`~det_sdk.storage.CheckpointNotFoundError` if its files are gone."""
        c = self.store.checkpoint(uuid)
        if c is None:
            raise NotFound(f"no checkpoint {uuid}")
        storage = self.storage(self.config_of(c["trial_id"]))
        with storage.restore(uuid) as path:
            yield path

    def stored(self, uuid: str) -> bool:
        """Whether recorded checkpoint ``uuid``'s files are in its storage (a folder, or an
        object store's manifest): asked of the storage, whichever it is."""
        c = self.store.checkpoint(uuid)
        if c is None:
            return False
        return self.storage(self.config_of(c["trial_id"])).exists(uuid)

    def info(self, uuid: str) -> dict[str, Any]:
        c = self.store.checkpoint(uuid)
        if c is None:
            raise NotFound(f"no checkpoint {uuid!r}")
        return self._out(c)

    def list(self, trial_id: int | None = None) -> list[dict[str, Any]]:
        return [self._out(c) for c in self.store.checkpoints(trial_id)]

    def path_of(self, trial_id: int, uuid: str) -> str:
        """Where trial ``trial_id``'s checkpoint ``uuid`` is: a folder's path, or the
        object store's URL of it (``s3://bucket/prefix/<uuid>``), as its storage says."""
        return f"{self.storage(self.config_of(trial_id)).describe()}/{uuid}"

    def _out(self, c: CheckpointRow) -> dict[str, Any]:
        t = self.store.trial(c["trial_id"])
        path = None if t is None else self.path_of(t["id"], c["uuid"])
        return {
            "uuid": c["uuid"], "trial_id": c["trial_id"],
            "experiment_id": t["experiment_id"] if t else None,
            "steps_completed": c["steps"], "epoch": c["epoch"], "batch": c["batch"],
            "size": c["size"], "metrics": c["metrics"], "created": c["created"], "path": path,
            "stage": c.get("stage"), "damaged": c.get("damaged"),
            "keras_backend": c.get("keras_backend"),
            # its owner: its trial's experiment's (issue 59)
            **self._owner(t["experiment_id"] if t else None),
        }

    def _owner(self, exp_id: int | None) -> dict[str, Any]:
        exp = None if exp_id is None else self.store.experiment(exp_id)
        owner = self.store.owner_or_first(exp.get("owner_id") if exp else None)
        return {"user_id": owner, "username": self.store.user_names().get(owner, "")}

    def of_trial(self, trial_id: int, best: bool, stage: str | None = None) -> dict[str, Any]:
        """A trial's latest checkpoint, or its best by the searcher metric (non-finite
        values rank last, :func:`det_sdk.wire.metric_rank`: a trial whose every
        checkpoint holds NaN still has a "best", its first); of ``stage`` when given
        (det_sdk.stages), else the latest of any stage and the best of the searched one."""
        rows = self.intact(trial_id)
        if stage is not None:
            rows = [r for r in rows if stage_of(r) == stage]
        if not rows:
            of = f" of stage {stage!r}" if stage is not None else ""
            raise NotFound(f"trial {trial_id} has no checkpoint{of}")
        if not best:  # the newest (stages count steps from 0 each: by time)
            return self._out(max(rows, key=lambda r: r["created"]))
        metric, smaller = self.config_of(trial_id).searcher_metric
        # the searched stage's: the model the searcher measured (det_sdk.stages)
        candidates = rows if stage is not None else [r for r in rows if _searched(r)]
        ranked = [self._out(r) for r in
                  best_first(candidates, metric, smaller)]
        if not ranked:
            raise NotFound(f"no checkpoint of trial {trial_id} has {metric!r}")
        return ranked[0]

    # --- sweeping -----------------------------------------------------------------------

    # builtins.list: in this class `list` is the method above
    def sweep_unrecorded(self, bases: Iterable[Path]) -> builtins.list[Path]:
        """Delete checkpoint directories under ``bases`` that this master's trials
        wrote and no record names.

        They are what a trial killed between writing a checkpoint and reporting it
        leaves. Only uuid-named directories whose owner file names an allocation of
        this master go: another master sharing the storage, a local run, or an older
        det_sdk wrote the others, and this master cannot know that they are unused.
        The caller makes sure that no trial writing to a base runs (its report may
        still be on the way), and holds the lifecycle lock: the directories are renamed,
        then deleted by :meth:`empty_trash` once the lock is released. Returns what
        goes. What a crash left renamed goes too.
        """
        recorded = {c["uuid"] for c in self.store.checkpoints()}
        gone = []
        for base in bases:
            if not base.is_dir():
                continue
            for p in base.iterdir():
                if _TRASH.match(p.name) and p.is_dir() and not p.is_symlink():
                    with self._trash_lock:
                        self._trash.append(partial(remove_tree, p))
                elif (is_checkpoint_name(p.name) and p.name not in recorded and p.is_dir()
                        and self._written_by(p)):
                    self._to_trash(p)
                    gone.append(p)
        if gone:
            log.info("deleted %d unrecorded checkpoint directories", len(gone))
        return gone
