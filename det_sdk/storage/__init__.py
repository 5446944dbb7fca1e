"""Checkpoint storage: a directory per checkpoint UUID, written atomically.

A checkpoint is written into a hidden temporary directory beside its final place,
flushed to disk, and renamed into place only when complete. A crash mid-save leaves
a ``.tmp-*`` directory that is never listed and is swept on the next save, never a
half checkpoint under a real UUID.

>>> import tempfile, pathlib
>>> storage = SharedFSStorage(tempfile.mkdtemp())
>>> with storage.store() as (uuid, path):
...     _ = (path / "weights.bin").write_bytes(b"...")
>>> storage.list() == [uuid]
True
>>> (storage.path(uuid) / "weights.bin").read_bytes()
b'...'
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import threading
import uuid as uuidlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from det_sdk.atomic import fsync_path
from det_sdk.env import task_owner
from det_sdk.errors import DetSdkError, UsageError
from det_sdk.storage._trees import RETIRED_SUFFIX, pause, remove_tree, retire_dir
from det_sdk.wire import metric_rank

__all__ = ["OWNER_FILE", "RETIRED_SUFFIX", "CheckpointNotFoundError", "CheckpointStorage",
           "SharedFSStorage", "Staged", "best_first", "check_uuid", "folder_size", "fsync_path",
           "open_storage", "pause", "pid_alive", "read_owner", "remove_tree", "retire_dir"]

_TMP_PREFIX = ".tmp-"
#: Written into every checkpoint a master's task saves: ``{"allocation_id", "trial_id"}``
#: of the task (``DET_ALLOCATION_ID``/``DET_TRIAL_ID``). A master deletes a checkpoint
#: directory only if it names one of that master's own allocations (of the trial whose
#: record it drops): masters sharing a ``host_path`` never delete each other's.
OWNER_FILE = ".det_sdk-owner.json"


class CheckpointNotFoundError(DetSdkError, LookupError):
    """No checkpoint with that UUID in this storage."""


@dataclasses.dataclass(frozen=True)
class Staged:
    """A checkpoint being written (:meth:`CheckpointStorage.stage`): its files go in
    ``path``; ``publish()`` stores it whole (and removes what was local); ``discard()``
    drops it. Each removes what is left of the other's work if it fails.

    >>> import tempfile
    >>> s = SharedFSStorage(tempfile.mkdtemp()).stage()
    >>> _ = (s.path / "w.bin").write_bytes(b"w")
    >>> s.publish()
    """

    uuid: str
    path: Path
    publish: Callable[[], None]
    discard: Callable[[], None]


class CheckpointStorage:
    """Where checkpoints live: one per store (:class:`SharedFSStorage`; the object stores
    S3, GCS and Azure through :class:`~det_sdk.storage._objects.ObjectStoreStorage`),
    chosen once from the config's ``checkpoint_storage`` (:func:`open_storage`).
    Everything that writes, reads, lists or deletes checkpoints goes through it, and
    never asks which store it is.

    A checkpoint is stored whole or not at all: :meth:`store` publishes it only when the
    caller's block ends without error; :meth:`list` never shows a partial one.
    """

    @contextlib.contextmanager
    def store(self, uuid: str | None = None) -> Iterator[tuple[str, Path]]:
        """A local directory to fill, yielded with the checkpoint's uuid; stored when the
        block ends without error (:meth:`stage`, then its ``publish``)."""
        staged = self.stage(uuid)
        try:
            yield staged.uuid, staged.path
        except BaseException:
            staged.discard()
            raise
        staged.publish()

    def stage(self, uuid: str | None = None) -> Staged:
        """A local directory to fill for checkpoint ``uuid`` (a new one by default), stored
        only by the :class:`Staged`'s ``publish()``: filling it and storing it may run in
        different threads, so a writer can fill the next one while this one uploads."""
        raise NotImplementedError

    def path(self, uuid: str) -> Path:
        """A local directory holding checkpoint ``uuid``'s files (the store's own folder,
        or a verified copy kept until :meth:`close`)."""
        raise NotImplementedError

    @contextlib.contextmanager
    def restore(self, uuid: str) -> Iterator[Path]:
        """A local directory with checkpoint ``uuid``'s files for the block (a copy, if
        any, is removed after it)."""
        yield self.path(uuid)

    def download(self, uuid: str, dest: str | os.PathLike[str]) -> None:
        """Checkpoint ``uuid``'s files copied into the local directory ``dest`` (without
        the owner record: the master's bookkeeping, not the user's)."""
        src = self.path(uuid)
        shutil.copytree(src, Path(dest), dirs_exist_ok=True, copy_function=_copy_file,
                        ignore=lambda d, names: [OWNER_FILE] if Path(d) == src else [])

    def delete(self, uuid: str) -> None:
        raise NotImplementedError

    def retire(self, uuid: str) -> Callable[[], object]:
        """Unlist checkpoint ``uuid`` now and return what deletes the rest of it (slow:
        the master calls it outside its lock). By default the whole delete is deferred."""
        return partial(self.delete, uuid)

    def list(self) -> list[str]:
        """The uuids of the checkpoints stored whole."""
        raise NotImplementedError

    def sweep_abandoned(self) -> None:
        """Remove what saves and deletions cut short (a kill) left, once the process that
        made them is gone: never a checkpoint stored whole. A process's first save calls
        it, and so does a master's sweep of the storages its trials use."""

    def exists(self, uuid: str) -> bool:
        return uuid in self.list()

    def read_owner(self, uuid: str) -> dict[str, Any] | None:
        """The :data:`OWNER_FILE` record of checkpoint ``uuid`` (which master's task saved
        it); None if it has none or it cannot be read."""
        raise NotImplementedError

    def describe(self) -> str:
        """Where it is, for messages (a path, an ``s3://`` URL): never a secret."""
        raise NotImplementedError

    def check(self) -> None:
        """Raise (:class:`~det_sdk.errors.StorageError`) unless a small write and delete
        work: a wrong key, a missing bucket, a bad endpoint are found before training."""

    def close(self) -> None:
        """Remove what this process downloaded (nothing for a shared filesystem)."""


def _copy_file(src: str, dst: str) -> None:
    from det_sdk.arrayfile import copy_file

    copy_file(src, dst)


def open_storage(config: Mapping[str, Any] | None,
                 default_dir: str | os.PathLike[str] | None = None,
                 owner: dict[str, Any] | None = None) -> CheckpointStorage:
    """The storage a ``checkpoint_storage`` config (a mapping, as stored) names.

    ``type: shared_fs`` keeps checkpoints under ``default_dir`` where given (a local
    run's own ``checkpoints/``), else under ``host_path``; ``type: s3``, ``gcs`` or
    ``azure`` (or ``host_path: s3://bucket/prefix``, ``gs://...``, ``az://...``) in the
    bucket or container.

    >>> open_storage(None, "/tmp/run/checkpoints").describe()
    '/tmp/run/checkpoints'
    """
    from det_sdk.config.storage import CheckpointStorageConfig

    cfg = CheckpointStorageConfig.model_validate(dict(config or {}))
    # The one import loop of this package, by design: the object stores implement the
    # interface defined here and are imported here only when a config names one (each
    # needs its extra, obstore), so `import det_sdk.storage` stays light
    if cfg.type == "s3":
        from det_sdk.storage.s3 import S3Storage

        assert cfg.bucket is not None  # validated
        return S3Storage(cfg.bucket, cfg.prefix, endpoint_url=cfg.endpoint_url,
                         access_key=cfg.access_key, secret_key=cfg.secret_key, owner=owner)
    if cfg.type == "gcs":
        from det_sdk.storage.gcs import GCSStorage

        assert cfg.bucket is not None  # validated
        return GCSStorage(cfg.bucket, cfg.prefix, owner=owner)
    if cfg.type == "azure":
        from det_sdk.storage.azure import AzureStorage

        assert cfg.container is not None  # validated
        return AzureStorage(cfg.container, cfg.prefix, connection_string=cfg.connection_string,
                            account_url=cfg.account_url, credential=cfg.credential, owner=owner)
    base = default_dir if default_dir is not None else cfg.host_path or ".det-checkpoints"
    return SharedFSStorage(base, owner=owner)


class SharedFSStorage(CheckpointStorage):
    """Checkpoints as directories under ``base`` on a local or shared filesystem."""

    def __init__(self, base: str | os.PathLike[str],
                 owner: dict[str, Any] | None = None) -> None:
        self.base = Path(base)
        #: what :data:`OWNER_FILE` holds in each checkpoint stored; by default the
        #: task's allocation and trial from its environment (none off the cluster)
        self.owner = owner if owner is not None else _task_owner()
        self._swept = False  # abandoned temporary folders removed (at the first save)

    def stage(self, uuid: str | None = None) -> Staged:
        """A temporary folder beside the checkpoints; published by an atomic rename."""
        uuid = uuid or str(uuidlib.uuid4())
        check_uuid(uuid)
        if not self._swept:  # once per process: a save is the only writer of its run
            self.base.mkdir(parents=True, exist_ok=True)
            self.sweep_abandoned()
            self._swept = True
        tmp = self.base / f"{_TMP_PREFIX}{uuid}-{os.getpid()}"
        try:
            tmp.mkdir()
        except FileNotFoundError:  # the folder was removed since
            self.base.mkdir(parents=True, exist_ok=True)
            tmp.mkdir()

        def publish() -> None:
            try:
                if self.owner:  # after the caller's files: a copied-in owner file is replaced
                    (tmp / OWNER_FILE).write_text(json.dumps(self.owner))
                # the files and the folders that name them, all at once: each folder's
                # entries are complete once the caller is done
                fsync_together([Path(top, name) for top, _, files in os.walk(tmp)
                                for name in ("", *files)])  # each folder, as its own top
                os.rename(tmp, self.base / uuid)
                fsync_path(self.base)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise

        return Staged(uuid, tmp, publish, lambda: shutil.rmtree(tmp, ignore_errors=True))

    def path(self, uuid: str) -> Path:
        check_uuid(uuid)
        p = self.base / uuid
        if not p.is_dir():
            raise CheckpointNotFoundError(f"no checkpoint {uuid!r} in {self.base}")
        return p

    def delete(self, uuid: str) -> None:
        shutil.rmtree(self.path(uuid))

    def retire(self, uuid: str) -> Callable[[], object]:
        return retire_dir(self.path(uuid))

    def exists(self, uuid: str) -> bool:
        check_uuid(uuid)
        return (self.base / uuid).is_dir()

    def describe(self) -> str:
        return str(self.base)

    def read_owner(self, uuid: str) -> dict[str, Any] | None:
        check_uuid(uuid)
        return read_owner(self.base / uuid)

    def list(self) -> list[str]:
        if not self.base.is_dir():
            return []
        return sorted(
            p.name for p in self.base.iterdir() if p.is_dir() and not p.name.startswith(".")
        )

    def sweep_abandoned(self) -> None:
        """Remove temporary directories of saves whose process is gone."""
        for p in self.base.glob(f"{_TMP_PREFIX}*"):
            pid = p.name.rsplit("-", 1)[-1]
            if pid.isdigit() and not pid_alive(int(pid)):
                shutil.rmtree(p, ignore_errors=True)


def _task_owner() -> dict[str, Any] | None:
    """The owner record of a master's task (``DET_ALLOCATION_ID``), else None."""
    return task_owner()


def read_owner(path: Path) -> dict[str, Any] | None:
    """The :data:`OWNER_FILE` record of checkpoint directory ``path``; None if it has
    none (a local run's, or saved before det_sdk wrote one) or it is unreadable."""
    try:
        owner = json.loads((path / OWNER_FILE).read_bytes())
    except (OSError, ValueError):
        return None
    return owner if isinstance(owner, dict) else None


def folder_size(folder: Path) -> int:
    """The bytes of the files under ``folder``: the size a checkpoint is reported with.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); _ = (d / "w.bin").write_bytes(b"abc")
    >>> folder_size(d)
    3
    """
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def check_uuid(uuid: str) -> None:
    """Refuse names that would escape the storage directory."""
    if not uuid or "/" in uuid or "\\" in uuid or uuid.startswith(".") or uuid in ("..",):
        raise UsageError(f"not a checkpoint uuid: {uuid!r}")


_Record = TypeVar("_Record", bound=Mapping[str, Any])  # a plain dict, or a store's typed row


def best_first(rows: Iterable[_Record], metric: str, smaller_is_better: bool) -> list[_Record]:
    """Checkpoint records that hold ``metric``, best first (for "best" and retention).

    Ranked by :func:`det_sdk.wire.metric_rank`: a non-finite value (NaN, +/-Infinity:
    a diverged model) is the worst in both directions, after every finite one; ties
    keep the records' order.

    >>> best_first([{"metrics": {"val_loss": 0.3}}, {"metrics": {}},
    ...             {"metrics": {"val_loss": 0.2}}], "val_loss", True)
    [{'metrics': {'val_loss': 0.2}}, {'metrics': {'val_loss': 0.3}}]
    >>> rows = [{"metrics": {"acc": v}} for v in (float("nan"), 0.5, float("-inf"), 0.9)]
    >>> [r["metrics"]["acc"] for r in best_first(rows, "acc", smaller_is_better=False)]
    [0.9, 0.5, nan, -inf]
    """
    scored = [r for r in rows if metric in (r.get("metrics") or {})]
    return sorted(scored, key=lambda r: metric_rank(r["metrics"][metric], smaller_is_better))


def pid_alive(pid: int) -> bool:
    """True while a process with this id exists and has not exited.

    A zombie (exited, not yet reaped by its parent) counts as dead: where nothing
    reaps orphans, a dead trial or master would otherwise look alive for ever.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc (macOS): kill(0) is all we know
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


_fsync_pool: tuple[int, ThreadPoolExecutor] | None = None  # (pid, pool)
_fsync_pool_lock = threading.Lock()


def fsync_together(paths: list[Path]) -> None:
    """``fsync_path`` each of ``paths``, all at once: the filesystem's journal commits
    concurrent syncs together (a checkpoint's five files: 1.6 ms against 2.3 ms one
    after another on this project's VM, more while training competes for the disk)."""
    global _fsync_pool
    if len(paths) <= 1:
        for p in paths:
            fsync_path(p)
        return
    with _fsync_pool_lock:
        # a forked child inherits the pool but not its threads: it makes its own
        if _fsync_pool is None or _fsync_pool[0] != os.getpid():
            _fsync_pool = (os.getpid(), ThreadPoolExecutor(8, thread_name_prefix="det_sdk-fsync"))
        pool = _fsync_pool[1]
    for done in [pool.submit(fsync_path, p) for p in paths]:
        done.result()  # raises the first failure
