"""Streamed predictions in an object store: ``context.predict(..., output="s3://bucket/p")``
(``gs://``, ``az://``) and ``det_sdk.load_predictions("s3://bucket/p")``.

The layout is a directory's (det_sdk.predictions.format), as objects under the prefix::

    manifest.json            the job; "complete": true and every part's rows once finished
    part-000000000.npy       global batch 0's predictions (several outputs: .npz)
    part-000000000.json      its sidecar: rows, bytes, xxh3 of its values, the part's ETag
    .predict.lock            the run writing the output: host, pid, a heartbeat

An object is written whole or not at all (a PUT), so there are no temporary names: a
part is uploaded, then its sidecar, and the part is complete when its sidecar exists
and the part object is the one the sidecar describes (its size and ETag, which the
store changes on any rewrite). A run into the same URL skips the complete parts and
writes the others, exactly once, however the previous run ended; the manifest is
written last. Every read (det_sdk.predictions.loader's
:func:`~det_sdk.predictions.loader.load_from_bucket`) checks each part's bytes against
its digest.

Credentials: those of the run's ``checkpoint_storage`` where it names the same store
and bucket (container), else the environment's (the S3 credential chain and
``AWS_ENDPOINT_URL``; Google's, or ``STORAGE_EMULATOR_HOST``; Azure's
``AZURE_STORAGE_CONNECTION_STRING``, or ``AZURE_STORAGE_ACCOUNT_NAME`` with
``AZURE_STORAGE_ACCOUNT_KEY``). The store is det_sdk.storage's (the checkpoints'
client, its retries and its errors, which never show a secret).

The lock (object stores have no ``flock``): the chief creates ``.predict.lock`` only
if absent (a conditional PUT) and rewrites it every :attr:`BucketLock.HEARTBEAT`
seconds. A second run finds it and is refused (``PredictionsBusyError``) while its
holder lives: on the same host while its process exists, on another while its
heartbeat is younger than :attr:`BucketLock.STALE` seconds. A dead holder's lock is
taken over. Limits: two runs taking over the same stale lock in the same instant may
both start; the heartbeat finds the loser (the lock names the other run) and stops it
before its next part. Another host's staleness is judged by the store's clock against
this host's: clocks more than a few seconds apart shorten or lengthen the wait.
"""

from __future__ import annotations

import io
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from det_sdk.errors import UsageError
from det_sdk.predictions.errors import (
    PredictionsBusyError,
    PredictionsCorruptError,
    PredictionsMismatchError,
)
from det_sdk.predictions.format import (
    FORMAT,
    LOCK,
    MANIFEST,
    PART_FILE,
    UNREADABLE,
    digest_leaves,
    dumps,
    encode_leaves,
    flatten_outputs,
    part_stem,
    same_structure,
    sidecar_ok,
)
from det_sdk.predictions.manifest import check_same_job, final_manifest, manifest_problem
from det_sdk.predictions.store import OutputStore

if TYPE_CHECKING:
    from det_sdk.storage._objects import ObjectStoreStorage

__all__ = ["BucketLock", "BucketPartStore", "bucket_storage", "decode"]

THREADS = 16  # parallel requests when reading many small objects (sidecars, parts)
_HELD: dict[str, BucketLock] = {}  # this process's locks, by URL (a rerun continues)
_HELD_LOCK = threading.Lock()


# --- the store behind a URL --------------------------------------------------------------


def bucket_storage(url: str, storage: Any = None) -> ObjectStoreStorage:
    """det_sdk.storage's client for ``url`` (``s3://bucket/prefix``, ``gs://``, ``az://``):
    with ``storage``'s credentials where it names the same store and bucket (the run's
    checkpoint storage: a ``CheckpointStorage``, or a ``checkpoint_storage`` mapping),
    else the environment's. Messages name ``output=``."""
    from det_sdk.config.storage import URL_TYPES
    from det_sdk.storage import open_storage
    from det_sdk.storage._objects import ObjectStoreStorage

    scheme = url[:url.index("://") + 3]
    kind = URL_TYPES[scheme]
    location, _, prefix = url[len(scheme):].partition("/")
    if isinstance(storage, Mapping) and storage:
        try:  # a checkpoint_storage mapping: the storage it names (no request is made)
            storage = open_storage(storage, owner={})
        except ValueError:  # the run's own storage was validated where it was opened
            storage = None
    if isinstance(storage, ObjectStoreStorage) and storage.kind == kind \
            and storage.location == location:
        clone = storage.at(prefix)  # its endpoint and credentials, under the output's prefix
        clone.named_by = "output="
        return clone
    env = os.environ
    made: ObjectStoreStorage
    if kind == "s3":
        from det_sdk.storage.s3 import S3Storage

        made = S3Storage(location, prefix, owner={},
                         endpoint_url=env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL"))
    elif kind == "gcs":
        from det_sdk.storage.gcs import GCSStorage

        made = GCSStorage(location, prefix, owner={})
    else:
        from det_sdk.storage.azure import AzureStorage

        if env.get("AZURE_STORAGE_CONNECTION_STRING"):
            made = AzureStorage(location, prefix, owner={},
                                connection_string=env["AZURE_STORAGE_CONNECTION_STRING"])
        elif env.get("AZURE_STORAGE_ACCOUNT_NAME"):
            made = AzureStorage(
                location, prefix, owner={},
                account_url=f"https://{env['AZURE_STORAGE_ACCOUNT_NAME']}.blob.core.windows.net",
                credential=env.get("AZURE_STORAGE_ACCOUNT_KEY"))
        else:
            raise UsageError(
                f"output={url!r}: no Azure credentials: give the run a checkpoint_storage "
                f"of type azure with container {location!r}, or set "
                "AZURE_STORAGE_CONNECTION_STRING (or AZURE_STORAGE_ACCOUNT_NAME and "
                "AZURE_STORAGE_ACCOUNT_KEY)")
    made.named_by = "output="
    return made


def _etag(value: Any) -> str | None:
    """An ETag without its quotes (stores quote it in one answer and not in another)."""
    return str(value).strip('"') if value else None


def _encode(structure: Mapping[str, Any], leaves: list[np.ndarray]) -> bytes:
    buf = io.BytesIO()
    encode_leaves(buf, structure, leaves)  # as a directory's parts
    return buf.getvalue()


# np.load parses each header with ast.literal_eval, and CPython 3.11's AST construction
# keeps its recursion depth in state the threads share: parts decoded in parallel once
# failed with "SystemError: AST constructor recursion depth mismatch" (CPython gh-106905;
# seen in tests/e2e/test_predict_buckets.py). Decoding is a copy of a small part: one at
# a time costs nothing the downloads (still parallel) would notice.
_DECODING = threading.Lock()


def decode(name: str, data: bytes) -> list[np.ndarray]:
    """A part object's arrays from its bytes (``name``: its ``.npy`` or ``.npz`` name)."""
    with _DECODING:
        if name.endswith(".npy"):
            return [np.load(io.BytesIO(data), allow_pickle=False)]
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            return [z[k] for k in z.files]


# --- the lock ----------------------------------------------------------------------------


class BucketLock:
    """The lock object of one output URL, held by a run's chief (see the module doc)."""

    HEARTBEAT = 10.0  #: seconds between two rewrites of the lock by its holder
    STALE = 60.0  #: seconds without a heartbeat after which another host's lock is dead

    def __init__(self, storage: ObjectStoreStorage, url: str) -> None:
        self.storage, self.url = storage, url
        self.token = secrets.token_hex(8)
        self.lost: str | None = None  # who took the lock from this run (it must stop)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _body(self) -> bytes:
        return json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                           "token": self.token, "time": time.time()}).encode()

    def _holder(self) -> tuple[dict[str, Any], float] | None:
        """The lock's record and its age in seconds (by the store's clock); None: none."""
        try:
            data = self.storage.get_object(LOCK)
            age = time.time() - self.storage.head_object(LOCK)["last_modified"].timestamp()
        except FileNotFoundError:
            return None
        try:
            record = json.loads(data)
        except ValueError:
            record = None
        return (record if isinstance(record, dict) else {}), age

    def _alive(self, record: Mapping[str, Any], age: float) -> bool:
        from det_sdk.storage import pid_alive

        pid = record.get("pid")
        if record.get("host") == socket.gethostname() and isinstance(pid, int):
            return pid != os.getpid() and pid_alive(pid)  # our own pid: an older run's
        return age < self.STALE

    def acquire(self) -> None:
        """Create the lock, or take over a dead holder's; :class:`PredictionsBusyError`
        while a live run holds it."""
        for _ in range(5):
            # looked at first, then created only if absent: a store that ignores the
            # condition (some emulators) still refuses a live holder
            found = self._holder()
            if found is None:
                if self.storage.put_object(LOCK, self._body(), create=True) is not None:
                    break
                continue  # another run created it since: look at it
            record, age = found
            if self._alive(record, age):
                raise PredictionsBusyError(
                    f"predict: output {self.url} is being written by another run (process "
                    f"{record.get('pid')} on {record.get('host')}, heartbeat {age:.0f} s "
                    f"ago, holding {LOCK}): wait for it to end, or give another output=")
            self.storage.delete_object(LOCK)  # a dead run's lock: taken over
        else:
            raise PredictionsBusyError(f"predict: output {self.url}: its lock {LOCK} kept "
                                       "changing hands; another run is starting: try again")
        self._thread = threading.Thread(target=self._beat, daemon=True,
                                        name="det-predict-lock")
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.HEARTBEAT):
            try:
                found = self._holder()
                record = found[0] if found else {}
                if record.get("token") != self.token:
                    self.lost = (f"process {record.get('pid')} on {record.get('host')}"
                                 if found else "nobody (the lock object was removed)")
                    return
                self.storage.put_object(LOCK, self._body())
            except Exception:  # the store is away: beat again next time
                continue

    def check(self) -> None:
        """Raise :class:`PredictionsBusyError` once another run has taken the lock."""
        if self.lost is not None:
            raise PredictionsBusyError(
                f"predict: output {self.url}: this run's lock was taken over by {self.lost} "
                "(its heartbeat was late): stopped so that one run writes the output")

    def release(self) -> None:
        """Stop the heartbeat and remove the lock if it is still this run's."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        found = self._holder()
        if found is not None and found[0].get("token") == self.token:
            self.storage.delete_object(LOCK)


# --- writing -----------------------------------------------------------------------------


class BucketPartStore(OutputStore):
    """One output URL: what each process of a streamed predict writes through, with
    :class:`~det_sdk.predictions.store.OutputStore`'s methods (begin, complete_parts, write_part,
    finish, ...): the predict loops do not know which they have."""

    def __init__(self, url: str, storage: ObjectStoreStorage) -> None:
        self.url, self.storage = url, storage
        self._structure: dict[str, Any] | None = None

    @classmethod
    def open(cls, url: str, checkpoint_storage: Any = None) -> BucketPartStore:
        """The store of ``url``, credentials as :func:`bucket_storage` finds them
        (``checkpoint_storage``: the run's storage, or a ``checkpoint_storage`` mapping)."""
        return cls(url, bucket_storage(url, checkpoint_storage))

    @property
    def location(self) -> str:
        return self.url

    def sync(self) -> None:
        """Nothing to do: an object is durable once its PUT has returned."""

    def _listing(self) -> dict[str, dict[str, Any]]:
        return {o["path"]: o for o in self.storage.list_objects()}

    # the chief, before any process writes
    def begin(self, fingerprint: Mapping[str, Any], model: Mapping[str, Any]) -> None:
        """Take the output's lock (:class:`BucketLock`), then write the manifest, or check
        that the one there is this job's."""
        with _HELD_LOCK:
            if self.url not in _HELD:
                lock = BucketLock(self.storage, self.url)
                lock.acquire()
                _HELD[self.url] = lock
        try:
            manifest = self.read_manifest()
            if manifest is None:
                stray = sorted(p for p in self._listing() if PART_FILE.match(p))
                if stray:
                    raise PredictionsMismatchError(
                        f"predict: output {self.url} holds part objects ({stray[0]}, ...) but "
                        "no manifest.json: not this job's; give another output= or remove them")
                self.storage.put_object(MANIFEST, dumps({
                    "format": FORMAT, "complete": False, "fingerprint": dict(fingerprint),
                    "model": dict(model)}).encode())
            else:
                check_same_job(f"output {self.url}", manifest, fingerprint, model)
                self._structure = manifest.get("structure")
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        """Let another run write the output (done by :meth:`finish`, and by
        :func:`~det_sdk.predictions.gather_failures` when the run failed)."""
        with _HELD_LOCK:
            lock = _HELD.pop(self.url, None)
        if lock is not None:
            lock.release()

    def read_manifest(self) -> dict[str, Any] | None:
        """The manifest, or None where there is none yet; a damaged one is refused."""
        try:
            text = self.storage.get_object(MANIFEST)
        except FileNotFoundError:
            return None
        problem = manifest_problem(text)
        if problem:
            raise PredictionsCorruptError(
                f"predict: {self.url}/{MANIFEST} is damaged ({problem}): nothing tells which "
                "job its parts are; remove its objects (or give another output=) to predict "
                "again")
        return dict(json.loads(text))

    def read_sidecar(self, index: int) -> dict[str, Any] | None:
        """Part ``index``'s sidecar when it is whole; None when absent or damaged."""
        try:
            meta = json.loads(self.storage.get_object(f"{part_stem(index)}.json"))
        except (FileNotFoundError, ValueError):
            return None
        return meta if sidecar_ok(meta, index) else None

    def _sidecars(self, indices: Iterable[int]) -> dict[int, dict[str, Any] | None]:
        wanted = list(indices)
        with ThreadPoolExecutor(min(THREADS, max(1, len(wanted)))) as pool:
            return dict(zip(wanted, pool.map(self.read_sidecar, wanted)))

    def written_parts(self) -> set[int]:
        """The global batches with a sidecar, complete or not."""
        return {int(m.group(1)) for p in self._listing()
                if (m := PART_FILE.match(p)) and m.group(2) == "json"}

    # every process
    def complete_parts(self, indices: Iterable[int], *, verify: bool = True) -> set[int]:
        """Those of ``indices`` whose part is complete: a whole sidecar, and the part
        object it describes (same size and ETag: any rewrite changes the ETag; where the
        store gives none, ``verify`` downloads the part and checks its digest). Anything
        else is removed, to be written again."""
        listing = self._listing()
        asked = list(indices)  # this process's own parts: another's may be uploading now
        wanted = [i for i in asked if f"{part_stem(i)}.json" in listing]
        done = set()
        for i, meta in self._sidecars(wanted).items():
            if meta is not None and self._is_complete(meta, listing, verify):
                done.add(i)
            else:
                self._remove(i, listing)
        for i in set(asked) - set(wanted):  # uploaded without its sidecar (killed between)
            self._remove(i, listing)
        return done

    def _is_complete(self, meta: Mapping[str, Any], listing: Mapping[str, Any],
                     verify: bool) -> bool:
        found = listing.get(meta["file"])
        if found is None or found.get("size") != meta["bytes"]:
            return False
        known, stored = _etag(meta.get("e_tag")), _etag(found.get("e_tag"))
        if known and stored:
            return known == stored
        if not verify:
            return True
        try:
            data = self.storage.get_object(meta["file"])
        except FileNotFoundError:
            return False
        try:
            leaves = decode(meta["file"], data)
        except UNREADABLE:
            return False
        return digest_leaves(leaves) == meta["xxh3"] and all(len(a) == meta["rows"] for a in leaves)

    def _remove(self, index: int, listing: Mapping[str, Any]) -> None:
        stem = part_stem(index)
        for name in (f"{stem}.json", f"{stem}.npy", f"{stem}.npz"):  # the sidecar first
            if name in listing:
                self.storage.delete_object(name)

    def write_part(self, index: int, outputs: Any) -> int:
        """Upload global batch ``index``'s predictions, then its sidecar (the part is
        complete once both are there). Returns its number of rows."""
        with _HELD_LOCK:
            lock = _HELD.get(self.url)
        if lock is not None:
            lock.check()
        structure, leaves = flatten_outputs(outputs)
        self._structure = same_structure(self.structure(), structure, index, self.url)
        stem = part_stem(index)
        name = f"{stem}.npy" if structure["kind"] == "array" else f"{stem}.npz"
        data = _encode(structure, leaves)
        put = self.storage.put_object(name, data) or {}
        self.storage.put_object(f"{stem}.json", dumps({
            "index": index, "file": name, "rows": len(leaves[0]), "bytes": len(data),
            "xxh3": digest_leaves(leaves), "structure": structure,
            "e_tag": _etag(put.get("e_tag"))}).encode())
        return len(leaves[0])

    # the chief, after every process wrote its parts
    def finish(self, parts: int) -> dict[str, Any]:
        """Write the final manifest over parts ``0 .. parts-1`` (all complete), last."""
        manifest = final_manifest(self.read_manifest() or {},
                                  self._sidecars(range(parts)), parts, self.url)
        self.storage.put_object(MANIFEST, dumps(manifest).encode())
        self.release()
        return manifest
