"""Checkpoints as objects in an object store (S3, GCS, Azure Blob Storage), through
obstore (Rust's object_store: chosen by measurement, docs/benchmarks.md). Each store is a
small subclass (``s3.py``, ``gcs.py``, ``azure.py``) that makes obstore's store and names
its config fields; everything else (layout, manifest, sweep, verified reads) is here.

Layout under ``<scheme>://<bucket>/<prefix>/``, as Determined writes it, plus det_sdk's marks::

    <uuid>/<files...>                        the checkpoint's files
    <uuid>.det_sdk-manifest.json             every file's size and SHA-256: written last
    <uuid>/.det_sdk-pending.json             while uploading: host and pid of the writer

A checkpoint is listed only when its manifest exists; a save killed mid-upload leaves
objects without one, removed by a later save (its writer's process gone, or a day old).
Deleting removes the manifest first: a checkpoint is never listed half deleted.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import copy
import datetime
import functools
import hashlib
import json
import os
import shutil
import socket
import tempfile
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from det_sdk.errors import CheckpointCorruptError, DetSdkError, MissingExtraError, StorageError
from det_sdk.storage import (
    OWNER_FILE,
    CheckpointNotFoundError,
    CheckpointStorage,
    Staged,
    check_uuid,
    pid_alive,
    task_owner,
)
from det_sdk.storage import _manifest as manifest_lib

__all__ = ["ObjectStoreStorage"]

MANIFEST_SUFFIX = ".det_sdk-manifest.json"
PENDING = ".det_sdk-pending.json"
PART = 8 << 20  # multipart part and ranged-read size
STREAM_CHUNK = 256 << 10  # a ranged read's body is written in pieces of at least this (larger
# pieces cost more: obstore gathers each by copying; docs/benchmarks.md)
THREADS = 10  # parallel transfers per checkpoint
ABANDONED_AFTER = datetime.timedelta(days=1)  # another host's unfinished upload: swept after
PROBE_RETRY_SECONDS = 10.0  # the probe before training: a bad endpoint answers in seconds
RETRY_SECONDS = 120.0

_T = TypeVar("_T")


def _write_at(fd: int, view: memoryview, offset: int) -> int:
    """``view`` into ``fd`` at ``offset`` (pwrite may write less than asked); the end."""
    while view:
        done = os.pwrite(fd, view, offset)
        view, offset = view[done:], offset + done
    return offset


def _run_coroutine(make: Callable[[], Any]) -> None:
    """Run ``make()``'s coroutine to its end from synchronous code: on a thread of its own
    when this one already runs an event loop (asyncio.run cannot nest)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(make())
        return
    with ThreadPoolExecutor(1) as one:
        one.submit(lambda: asyncio.run(make())).result()


class _Digest:
    """One file's SHA-256, taken in order as its ranges land on disk in any order.

    Hashing the files after the download cost a 600 MiB checkpoint 0.4 s of a 1.8 s
    download on this machine (the large file's hash ran alone at the end). Each range
    that lands is hashed (read back from the page cache, in a thread: hashlib releases
    the GIL) as soon as every range before it has.
    """

    def __init__(self, fd: int) -> None:
        self.fd, self._sha = fd, hashlib.sha256()
        self.hashed = 0  # every byte before this is in the digest
        self._landed: dict[int, int] = {}  # start -> end of ranges written, not yet hashed
        self._turn = asyncio.Lock()

    async def landed(self, start: int, end: int) -> None:
        self._landed[start] = end
        async with self._turn:
            while self.hashed in self._landed:
                end = self._landed.pop(self.hashed)
                await asyncio.to_thread(self._hash, self.hashed, end)
                self.hashed = end

    def _hash(self, start: int, end: int) -> None:
        while start < end:
            data = os.pread(self.fd, min(manifest_lib.READ_CHUNK, end - start), start)
            if not data:
                return  # cannot happen: the file was sized first
            self._sha.update(data)
            start += len(data)

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


class _ObjectMissing(DetSdkError, FileNotFoundError):
    """An object that is not in the store (caught inside this module)."""


def _obstore(kind: str = "s3") -> Any:
    try:
        import obstore
    except ImportError:
        raise MissingExtraError(f"checkpoint_storage type {kind} needs obstore: "
                                f"pip install 'det_sdk[{kind}]'") from None
    return obstore


def retry_config(seconds: float) -> dict[str, Any]:
    """obstore's retries, bounded by time, not count: object_store's jittered backoff can
    spend ten retries in 5 s, less than a server restart (tests: killed for 5 s mid-save)."""
    return {"max_retries": 40, "retry_timeout": datetime.timedelta(seconds=seconds),
            "backoff": {"init_backoff": datetime.timedelta(milliseconds=500),
                        "max_backoff": datetime.timedelta(seconds=4), "base": 2}}


def client_options(url: str | None) -> dict[str, Any]:
    """obstore's HTTP client options; plain ``http://`` only where the endpoint says so."""
    return {"allow_http": bool(url and url.startswith("http://")),
            "connect_timeout": "10s", "timeout": "300s"}



def store_options(config: Any, url: str | None, retry: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments every obstore store takes: its ``config``, the HTTP client's
    options for ``url`` and the retries. Plain dicts, given as ``**``: obstore types each
    as a TypedDict of its own, which these (built from a checkpoint_storage config) are
    not to a type checker, though they hold only keys those TypedDicts name."""
    return {"config": config, "client_options": client_options(url), "retry_config": retry}


def _read_object(obs: Any, store: Any, key: str) -> bytes:
    """Object ``key``'s bytes (``obs``: the obstore module)."""
    return bytes(obs.get(store, key).bytes())

class ObjectStoreStorage(CheckpointStorage):
    """Checkpoints as objects under ``<scheme>://<location>/<prefix>/``: the store-specific
    part is :meth:`_make_store` and the names used in messages.

    A subclass sets :attr:`scheme`, :attr:`kind` (the config's ``type``),
    :attr:`location_field` (``bucket``/``container``), and defines :meth:`_make_store`
    and :meth:`credential_fields`.
    """

    scheme: ClassVar[str]
    kind: ClassVar[str]
    location_field: ClassVar[str] = "bucket"
    #: the config field to check when the store does not answer
    endpoint_field: ClassVar[str] = "the endpoint"
    #: words in a store's error that say the bucket/container does not exist
    missing_marks: ClassVar[tuple[str, ...]] = ()
    #: words in a store's error that say the credential was refused (besides 401/403)
    refused_marks: ClassVar[tuple[str, ...]] = ()

    #: what names this store in messages about a missing bucket (a streamed predict's
    #: output sets ``output=``)
    named_by: str = "checkpoint_storage"

    def __init__(self, location: str, prefix: str | None = None, *,
                 owner: dict[str, Any] | None = None) -> None:
        _obstore(self.kind)
        self.location, self.prefix = location, (prefix or "").strip("/")
        self.owner = owner if owner is not None else task_owner()
        self._store = self._make_store(retry_config(RETRY_SECONDS))
        self._probe_store = self._make_store(retry_config(PROBE_RETRY_SECONDS))
        self._swept = False
        self._cache: Path | None = None  # downloaded checkpoints (path()), removed at close

    def _make_store(self, retry: dict[str, Any]) -> Any:
        """obstore's store of :attr:`location` under :attr:`prefix`, retrying as ``retry``."""
        raise NotImplementedError

    def credential_fields(self) -> str:
        """The config fields (or environment) a refused request points at: no secret."""
        raise NotImplementedError

    # --- naming -------------------------------------------------------------------------

    def describe(self) -> str:
        return f"{self.scheme}://{self.location}/{self.prefix}".rstrip("/")

    def _where(self, uuid: str) -> str:
        return f"{self.describe()}/{uuid}"

    def _call(self, what: str, call: Callable[[], _T]) -> _T:
        """``call`` (obstore retries it with backoff), its failure as a StorageError that
        names the storage and the config field to look at; never a secret."""
        with self._translating(what):
            return call()

    @contextlib.contextmanager
    def _translating(self, what: str) -> Iterator[None]:
        """Raise obstore's errors inside as :meth:`_translated` says (others as they are)."""
        try:
            yield
        except Exception as err:
            mapped = self._translated(what, err)
            if mapped is err:
                raise
            raise mapped from None

    def _translated(self, what: str, err: Exception) -> Exception:
        """What :meth:`_call` raises for obstore's ``err`` while ``what``: ``err`` itself
        when it is not obstore's."""
        obs = _obstore(self.kind)
        if isinstance(err, FileNotFoundError):
            return err
        if isinstance(err, obs.exceptions.NotFoundError):
            return _ObjectMissing(str(err).split("\n", 1)[0])
        if not isinstance(err, obs.exceptions.BaseError):
            return err
        first = str(err).split("\n", 1)[0][:400]
        if isinstance(err, (obs.exceptions.PermissionDeniedError,
                            obs.exceptions.UnauthenticatedError)) or any(
                mark in str(err) for mark in self.refused_marks):
            return StorageError(f"{self.describe()}: {what} refused: check "
                                f"{self.credential_fields()}, and that the "
                                f"{self.location_field} exists ({first})")
        if any(mark in str(err) for mark in self.missing_marks):
            return StorageError(f"{self.describe()}: {what}: no such {self.location_field}: "
                                f"check {self._field(self.location_field)} ({first})")
        return StorageError(f"{self.describe()}: {what} failed after retries: check "
                            f"{self.endpoint_field} and the network ({first})")

    def at(self, prefix: str | None) -> ObjectStoreStorage:
        """This store's client (same bucket, endpoint and credentials) under another
        ``prefix``: a streamed predict's output in the checkpoints' bucket."""
        other = copy.copy(self)
        other.prefix = (prefix or "").strip("/")
        other._store = other._make_store(retry_config(RETRY_SECONDS))
        other._probe_store = other._make_store(retry_config(PROBE_RETRY_SECONDS))
        other._swept, other._cache = False, None
        return other

    def _field(self, name: str) -> str:
        return f"{self.named_by}.{name}" if self.named_by != "output=" else "output="

    # --- single objects (a streamed predict's parts: det_sdk.predictions.buckets) -------

    def put_object(self, key: str, data: bytes, *, create: bool = False) -> dict[str, Any] | None:
        """Write object ``key`` (under the prefix) whole; its ``e_tag``/``version``.
        ``create``: only if no such object exists (None when one does); a store that
        cannot write conditionally writes it anyway."""
        obs = _obstore(self.kind)

        def put() -> dict[str, Any] | None:
            if not create:
                return dict(obs.put(self._store, key, data))
            try:
                return dict(obs.put(self._store, key, data, mode="create"))
            except obs.exceptions.AlreadyExistsError:
                return None
            except obs.exceptions.NotSupportedError:
                return dict(obs.put(self._store, key, data))
        return self._call(f"writing {key}", put)

    def get_object(self, key: str) -> bytes:
        """Object ``key``'s bytes; ``FileNotFoundError`` when there is none."""
        obs = _obstore(self.kind)
        return self._call(f"reading {key}", lambda: bytes(obs.get(self._store, key).bytes()))

    def head_object(self, key: str) -> dict[str, Any]:
        """Object ``key``'s size, ``e_tag`` and ``last_modified``; ``FileNotFoundError``."""
        obs = _obstore(self.kind)
        return dict(self._call(f"checking {key}", lambda: obs.head(self._store, key)))

    def list_objects(self, prefix: str | None = None) -> list[dict[str, Any]]:
        """Every object under the prefix (and ``prefix``): path, size, e_tag."""
        obs = _obstore(self.kind)
        return self._call("listing", lambda: [dict(o) for batch in obs.list(self._store, prefix)
                                              for o in batch])

    def delete_object(self, key: str) -> None:
        """Remove object ``key`` (none: nothing to do)."""
        obs = _obstore(self.kind)
        with contextlib.suppress(FileNotFoundError):
            self._call(f"deleting {key}", lambda: obs.delete(self._store, key))

    # --- writing ------------------------------------------------------------------------

    def stage(self, uuid: str | None = None) -> Staged:
        """A local folder to fill; ``publish()`` uploads its files, then the manifest; the
        local folder is removed either way."""
        uuid = uuid or str(uuidlib.uuid4())
        check_uuid(uuid)
        if not self._swept:
            self.sweep_abandoned()
            self._swept = True
        staging = Path(tempfile.mkdtemp(prefix=f"det-ckpt-{uuid}-"))

        def publish() -> None:
            try:
                if self.owner:
                    (staging / OWNER_FILE).write_text(json.dumps(self.owner))
                self.upload(uuid, staging)
            finally:
                shutil.rmtree(staging, ignore_errors=True)

        return Staged(uuid, staging, publish, lambda: shutil.rmtree(staging, ignore_errors=True))

    def upload(self, uuid: str, folder: Path) -> None:
        """Store ``folder``'s files as checkpoint ``uuid``: a pending mark, the files in
        parallel (multipart when large), the manifest last. A failure removes what was
        uploaded and raises :class:`StorageError`."""
        obs = _obstore(self.kind)
        self._mark_pending(uuid)
        files = manifest_lib.files_of(folder)
        entries: dict[str, dict[str, Any]] = {}

        def one(rel: str) -> None:
            path = folder / rel
            entries[rel] = {"size": path.stat().st_size,
                            "sha256": manifest_lib.sha256_file(path)}
            self._call(f"uploading {uuid}/{rel}", lambda: obs.put(
                self._store, f"{uuid}/{rel}", path, chunk_size=PART, max_concurrency=4))

        try:
            with ThreadPoolExecutor(min(THREADS, max(1, len(files)))) as pool:
                for done in [pool.submit(one, rel) for rel in files]:
                    done.result()
            manifest = {"format": manifest_lib.FORMAT, "files": dict(sorted(entries.items()))}
            self._call(f"writing {uuid}{MANIFEST_SUFFIX}", lambda: obs.put(
                self._store, f"{uuid}{MANIFEST_SUFFIX}", manifest_lib.encode(manifest)))
        except BaseException:
            with contextlib.suppress(Exception):
                self._remove_objects(uuid)
            raise
        with contextlib.suppress(Exception):  # listed already: the mark only helps the sweep
            obs.delete(self._store, f"{uuid}/{PENDING}")

    def _mark_pending(self, uuid: str) -> None:
        """Mark ``uuid``'s objects as this process's unfinished work (an upload, or a
        removal): killed before it ends, its objects are swept once it is gone."""
        obs = _obstore(self.kind)
        mark = json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                           "time": time.time()}).encode()
        self._call(f"writing {uuid}/{PENDING}",
                   lambda: obs.put(self._store, f"{uuid}/{PENDING}", mark))

    # --- reading ------------------------------------------------------------------------

    def _manifest(self, uuid: str) -> dict[str, Any]:
        obs = _obstore(self.kind)
        check_uuid(uuid)
        try:
            data = self._call(f"reading {uuid}{MANIFEST_SUFFIX}", lambda: bytes(
                obs.get(self._store, f"{uuid}{MANIFEST_SUFFIX}").bytes()))
        except FileNotFoundError:
            raise CheckpointNotFoundError(f"no checkpoint {uuid!r} in {self.describe()}"
                                          ) from None
        return manifest_lib.decode(data, self._where(uuid))

    def download(self, uuid: str, dest: str | os.PathLike[str]) -> None:
        """Checkpoint ``uuid``'s files into ``dest``, each verified against the manifest
        (:class:`CheckpointCorruptError` if one differs or is missing)."""
        obs = _obstore(self.kind)
        manifest = self._manifest(uuid)
        dest = Path(dest)
        files = {rel: int(v["size"]) for rel, v in manifest["files"].items() if rel != OWNER_FILE}

        def stored_size(rel: str) -> None:  # first: no range asked beyond an object's end
            try:
                size = int(self._call(f"checking {uuid}/{rel}", lambda: obs.head(
                    self._store, f"{uuid}/{rel}"))["size"])
            except FileNotFoundError:
                size = -1
            if size != files[rel]:
                raise CheckpointCorruptError(
                    f"checkpoint {self._where(uuid)}: {rel} has "
                    f"{'no object' if size < 0 else f'{size} bytes'} in the store, its "
                    f"manifest says {files[rel]}")

        with ThreadPoolExecutor(THREADS) as pool:
            list(pool.map(stored_size, files))
        jobs: list[tuple[str, int, int]] = []
        # one descriptor per file, written in place at each range's offset: opening the
        # file for each 8 MiB range cost a 420 MiB download 0.25 s of CPU in 0.65 (and
        # 0.2 s of its 0.8 s) on this machine
        fds: dict[str, int] = {}
        try:
            for rel, size in files.items():
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                fds[rel] = os.open(dest / rel, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o666)
                os.ftruncate(fds[rel], size)
                jobs += [(rel, start, min(start + PART, size)) for start in range(0, size, PART)]
            digests = self._fetch_ranges(uuid, jobs, fds)
        finally:
            for fd in fds.values():
                os.close(fd)
        for rel in files:
            manifest_lib.check_digest(manifest, rel, digests[rel], self._where(uuid))

    def _fetch_ranges(self, uuid: str, jobs: list[tuple[str, int, int]],
                      fds: dict[str, int]) -> dict[str, str]:
        """Each (file, start, end) range of checkpoint ``uuid`` into its file's descriptor,
        :data:`THREADS` requests at a time, each written as its body streams in; every
        file's SHA-256, taken while the later ranges still download (:class:`_Digest`).

        Streamed, not read whole: obstore's ``get_range`` gathers a range's body into
        one buffer first, which cost a 600 MiB download 1.7x boto3's client CPU on this
        machine (docs/benchmarks.md). A body cut off mid-stream is asked for again from
        where it stopped by obstore itself, within its retry budget (:func:`retry_config`;
        tests/e2e/test_s3_checkpoints.py cuts some 20 bodies of one download).
        """
        obs = _obstore(self.kind)

        async def fetch(job: tuple[str, int, int], gate: asyncio.Semaphore) -> None:
            rel, start, end = job
            what, offset = f"downloading {uuid}/{rel}", start
            async with gate:
                try:
                    with self._translating(what):
                        result = await obs.get_async(self._store, f"{uuid}/{rel}",
                                                     options={"range": (start, end)})
                        async for chunk in result.stream(min_chunk_size=STREAM_CHUNK):
                            offset = _write_at(fds[rel], memoryview(chunk), offset)
                except FileNotFoundError:
                    raise CheckpointCorruptError(f"checkpoint {self._where(uuid)}: {rel} "
                                                 "is missing from the store") from None
            if offset != end:  # not the bytes asked for
                raise CheckpointCorruptError(
                    f"checkpoint {self._where(uuid)}: {rel} does not have the size in the "
                    "store that its manifest says")
            await digests[rel].landed(start, end)

        digests = {rel: _Digest(fd) for rel, fd in fds.items()}

        async def fetch_all() -> None:
            gate = asyncio.Semaphore(THREADS)
            await asyncio.gather(*(fetch(job, gate) for job in jobs))

        _run_coroutine(fetch_all)
        return {rel: digest.hexdigest() for rel, digest in digests.items()}

    def path(self, uuid: str) -> Path:
        """A local, verified copy of checkpoint ``uuid`` (downloaded once per process;
        removed at :meth:`close` and at exit: no copy is left behind)."""
        check_uuid(uuid)
        if self._cache is None:
            self._cache = Path(tempfile.mkdtemp(prefix="det-ckpt-cache-"))
            atexit.register(self.close)
        local = self._cache / uuid
        if not local.is_dir():
            tmp = self._cache / f".tmp-{uuid}"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            try:
                self.download(uuid, tmp)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            os.rename(tmp, local)
        return local

    @contextlib.contextmanager
    def restore(self, uuid: str) -> Iterator[Path]:
        folder = Path(tempfile.mkdtemp(prefix=f"det-restore-{uuid}-"))
        try:
            self.download(uuid, folder)
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def read_owner(self, uuid: str) -> dict[str, Any] | None:
        obs = _obstore(self.kind)
        try:
            owner = json.loads(bytes(obs.get(self._store, f"{uuid}/{OWNER_FILE}").bytes()))
        except (FileNotFoundError, ValueError, obs.exceptions.BaseError):
            return None
        return owner if isinstance(owner, dict) else None

    # --- listing and deleting -----------------------------------------------------------

    def _listing(self) -> tuple[set[str], dict[str, Any]]:
        """(uuids with a manifest, every uuid folder's name -> None)."""
        obs = _obstore(self.kind)
        found = self._call("listing", lambda: obs.list_with_delimiter(self._store, None))
        manifests = {o["path"].rsplit("/", 1)[-1][:-len(MANIFEST_SUFFIX)]
                     for o in found["objects"] if o["path"].endswith(MANIFEST_SUFFIX)}
        folders = {p.rstrip("/").rsplit("/", 1)[-1]: None for p in found["common_prefixes"]}
        return manifests, folders

    def list(self) -> list[str]:
        return sorted(u for u in self._listing()[0] if not u.startswith("."))

    def exists(self, uuid: str) -> bool:
        obs = _obstore(self.kind)
        check_uuid(uuid)
        try:
            self._call("checking", lambda: obs.head(self._store, f"{uuid}{MANIFEST_SUFFIX}"))
        except FileNotFoundError:
            return False
        return True

    def delete(self, uuid: str) -> None:
        """Unlist checkpoint ``uuid`` (its manifest goes first), then remove its objects."""
        self.retire(uuid)()

    def retire(self, uuid: str) -> Callable[[], object]:
        """Unlist checkpoint ``uuid`` now; what is returned removes its objects.

        A pending mark naming this process goes in before the manifest goes: a removal
        cut short (a master killed while it deletes) leaves objects that the next sweep
        on this host (:meth:`sweep_abandoned`: a restarted master's, a save's) removes
        at once, not after a day."""
        obs = _obstore(self.kind)
        if not self.exists(uuid):
            raise CheckpointNotFoundError(f"no checkpoint {uuid!r} in {self.describe()}")
        self._mark_pending(uuid)
        self._call(f"deleting {uuid}{MANIFEST_SUFFIX}",
                   lambda: obs.delete(self._store, f"{uuid}{MANIFEST_SUFFIX}"))
        return functools.partial(self._remove_objects, uuid)

    def _remove_objects(self, uuid: str) -> None:
        obs = _obstore(self.kind)
        check_uuid(uuid)
        keys = [o["path"] for batch in self._call(
                    f"listing {uuid}/", lambda: list(obs.list(self._store, f"{uuid}/")))
                for o in batch]
        # the mark last: until the end, an interrupted removal is still an unfinished upload
        keys.sort(key=lambda k: k.endswith(PENDING))
        for start in range(0, len(keys), 1000):  # S3's DeleteObjects takes 1000 at most
            chunk = keys[start:start + 1000]
            self._call(f"deleting {uuid}/", functools.partial(obs.delete, self._store, chunk))

    def sweep_abandoned(self) -> None:
        """Remove the objects of uploads and removals that will never finish: no
        manifest, and their writer's process gone (this host) or a day old (any host)."""
        obs = _obstore(self.kind)
        manifests, folders = self._listing()
        for uuid in folders:
            if uuid in manifests or uuid.startswith("."):
                continue
            try:
                key = f"{uuid}/{PENDING}"
                mark = json.loads(self._call(f"reading {key}", functools.partial(
                    _read_object, obs, self._store, key)))
                age = time.time() - float(mark.get("time", 0))
                dead = mark.get("host") == socket.gethostname() and isinstance(
                    mark.get("pid"), int) and not pid_alive(mark["pid"])
            except FileNotFoundError:
                # no mark: a folder being removed, or objects that a killed writer's
                # requests left after its mark was swept (a server finishes the requests
                # whose bodies it had): garbage once their newest is a day old
                dead, age = False, self._age_of_newest(uuid)
            except (ValueError, StorageError):
                continue
            if (dead or age > ABANDONED_AFTER.total_seconds()) and not self.exists(uuid):
                with contextlib.suppress(StorageError):
                    self._remove_objects(uuid)

    def _age_of_newest(self, uuid: str) -> float:
        """Seconds since the newest object under ``<uuid>/`` was written (0: none)."""
        obs = _obstore(self.kind)
        batches = self._call(f"listing {uuid}/", lambda: list(obs.list(self._store, f"{uuid}/")))
        times = [o["last_modified"].timestamp() for batch in batches for o in batch]
        return time.time() - max(times) if times else 0.0

    # --- probing and closing ------------------------------------------------------------

    def check(self) -> None:
        """Write and delete a small object: a wrong key, a bad endpoint or a bucket that
        refuses writes raises :class:`StorageError` naming the config field."""
        obs = _obstore(self.kind)
        key = f".det_sdk-probe-{uuidlib.uuid4()}"
        try:
            self._call("a test write", lambda: obs.put(self._probe_store, key, b"det_sdk probe"))
        except FileNotFoundError:  # GCS and Azure answer a write to a missing bucket 404
            raise StorageError(f"{self.describe()}: a test write: no such {self.location_field}:"
                               f" check {self._field(self.location_field)}") from None
        self._call("a test delete", lambda: obs.delete(self._probe_store, key))

    def close(self) -> None:
        if self._cache is not None:
            shutil.rmtree(self._cache, ignore_errors=True)
            self._cache = None
