"""Streamed predictions on disk: ordered part files, a manifest, exactly once across reruns.

``context.predict(model, data, output=DIR)`` (det_sdk.keras, and det_sdk.pytorch's script
context) writes its predictions here batch by batch instead of holding them in memory.
This module is the framework-neutral half (no TensorFlow, no torch): the layout of
``DIR``, the atomic part writes, the checks that a rerun continues *the same* job, and
:func:`load_predictions`.

``output=`` may also be an ``s3://``, ``gs://`` or ``az://`` URL: the same layout as
objects, through det_sdk.predictions_buckets (:func:`output_store` picks the store once;
the predict loops call the same methods on either).

Layout of an output directory::

    manifest.json            what the job is (input fingerprint, model, output structure);
                             "complete": true plus every part's rows once finished
    part-000000000.npy       global batch 0's predictions (one output: .npy; several: .npz)
    part-000000000.json      its sidecar: rows, bytes, an xxh3 digest of its values
    ...

A part is named by its *global batch index*: the input's batches are numbered in the
input's order and dealt out to the processes, so concatenating the parts by index gives
the predictions in the input's order, however many processes wrote them. A part is
written to a temporary name and renamed, then its sidecar likewise: a part with a
sidecar that verifies is complete; anything else (a temporary file, a part without its
sidecar, a part whose bytes do not match) is written again. Progress is therefore the
set of complete parts: a rerun with the same ``DIR`` skips them and writes the others,
so every row is in the output exactly once, whenever the previous run was killed.

Durability is checkpointed by time, not per part: every :attr:`PartStore.DURABLE_SECONDS`
(10 s) the writer flushes the output's filesystem once (``syncfs``), and each process
again when it has written its last part, before the final manifest (fsynced) says the
job is complete. A process killed loses nothing written (the page cache outlives it); a
machine that crashes loses at most the parts since the last flush, which the rerun's
digest check finds and writes again. Four fsyncs a part (file, sidecar, and the
directory after each) took 0.4-1.3 s of the writer's 1.6-2.5 s runs of 49 parts
(scripts/bench/bench_predict_progress.py).

>>> import numpy as np, tempfile
>>> d = tempfile.mkdtemp()
>>> store = PartStore(d)
>>> store.begin({"kind": "arrays", "rows": 5, "digest": "x"}, {"model": "m"})
>>> for i, rows in enumerate([np.arange(3.0), np.arange(3.0, 5.0)]):
...     _ = store.write_part(i, rows)
>>> store.finish(parts=2)["rows"]
5
>>> load_predictions(d)
array([0., 1., 2., 3., 4.])
"""

from __future__ import annotations

import errno
import json
import os
import queue
import re
import secrets
import threading
import time
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

import numpy as np
import xxhash

from det_sdk.atomic import fsync_path, write_atomic
from det_sdk.errors import CheckpointWriteError, DetSdkError, StateError, StorageError, UsageError

if TYPE_CHECKING:
    from det_sdk.predictions_buckets import BucketPartStore

__all__ = ["OutputStore", "PartStore", "PartWriter", "PredictionsBusyError",
           "PredictionsCorruptError", "PredictionsDiskFullError",
           "PredictionsIncompleteError", "PredictionsMismatchError", "StopAsked",
           "StreamedPredictions", "check_same_job", "flatten_outputs", "gather_failures",
           "load_predictions", "open_store", "output_store", "output_url", "part_stem",
           "resolve_output"]

FORMAT = 1
MANIFEST = "manifest.json"
LOCK = ".predict.lock"  # held (flock) by the chief of the run writing the directory
_PART = re.compile(r"^part-(\d{9})\.(npy|npz|json)$")
_KINDS = ("array", "list", "tuple", "dict")
# this process's locks, by directory: a second predict into the same directory from the
# same process (a rerun after a failure in a notebook) continues under the same lock
_HELD: dict[str, int] = {}
_HELD_LOCK = threading.Lock()


class PredictionsMismatchError(DetSdkError, ValueError):
    """The output directory holds another job's predictions (another input or model)."""


class PredictionsIncompleteError(DetSdkError, RuntimeError):
    """The output directory's predictions are not all written yet."""


class PredictionsCorruptError(DetSdkError, RuntimeError):
    """A part's bytes do not match its sidecar, or a model's outputs changed shape."""


class PredictionsBusyError(PredictionsMismatchError):
    """Another live process is writing into the output directory (its lock file)."""


class PredictionsDiskFullError(DetSdkError, OSError):
    """The output directory's filesystem is full (or the user's quota spent): the part
    being written is absent, the ones before it complete; free space and run again."""


# a full disk, or a quota spent: the same remedy (free space, run again)
_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


def _disk_full(err: OSError, path: Path, what: str) -> OSError:
    """``err`` as a :class:`PredictionsDiskFullError` naming ``path`` when the disk is
    full; any other ``OSError`` as it is."""
    if err.errno not in _FULL:
        return err
    return PredictionsDiskFullError(
        err.errno, f"predict: the disk holding the output directory {path} is full "
        f"({os.strerror(err.errno or errno.ENOSPC)}) writing {what}; the parts written so far "
        "are complete: free space and run again with the same output= to continue")


def part_stem(index: int) -> str:
    """The file name (without extension) of global batch ``index``.

    >>> part_stem(123)
    'part-000000123'
    """
    return f"part-{index:09d}"


# --- output structure --------------------------------------------------------------------


def flatten_outputs(outputs: Any) -> tuple[dict[str, Any], list[np.ndarray]]:
    """A model's outputs for one batch as (structure, leaves): one array, a list/tuple or
    a dict of arrays (one level, as Keras models return them).

    >>> s, leaves = flatten_outputs({"a": np.zeros((2, 3)), "b": np.ones(2, np.int32)})
    >>> s["kind"], [leaf["name"] for leaf in s["leaves"]], s["leaves"][0]["shape"]
    ('dict', ['a', 'b'], [3])
    """
    if isinstance(outputs, Mapping):
        kind, names, arrays = "dict", [str(k) for k in outputs], list(outputs.values())
    elif isinstance(outputs, (list, tuple)):
        kind = "list" if isinstance(outputs, list) else "tuple"
        names, arrays = [str(i) for i in range(len(outputs))], list(outputs)
    else:
        kind, names, arrays = "array", ["0"], [outputs]
    leaves = [np.ascontiguousarray(np.asarray(a)) for a in arrays]
    if not leaves or any(a.ndim == 0 for a in leaves):
        raise PredictionsCorruptError("predict: the model's outputs must be arrays with a batch "
                                      "dimension (one array, a list or a dict of them)")
    if len({len(a) for a in leaves}) != 1:
        raise PredictionsCorruptError("predict: the model's outputs have different numbers of "
                                      f"rows in one batch: {[len(a) for a in leaves]}")
    structure = {"kind": kind, "leaves": [
        {"name": n, "dtype": a.dtype.str, "shape": list(a.shape[1:])}
        for n, a in zip(names, leaves)]}
    return structure, leaves


def _digest(leaves: Iterable[np.ndarray]) -> str:
    h = xxhash.xxh3_64()
    for a in leaves:
        h.update(np.ascontiguousarray(a).view(np.uint8).reshape(-1).data)
    return h.hexdigest()


def digest_arrays(arrays: Iterable[np.ndarray]) -> str:
    """A content digest of arrays (dtype, shape, values), for an input's fingerprint.

    >>> digest_arrays([np.arange(3)]) == digest_arrays([np.arange(3)])
    True
    """
    h = xxhash.xxh3_64()
    for a in arrays:
        a = np.asarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        # in blocks of rows: a memory-mapped input is read once, never copied whole
        step = max(1, (64 << 20) // max(1, a[:1].nbytes))
        for start in range(0, max(len(a), 1) if a.ndim else 1, step):
            block = np.ascontiguousarray(a[start:start + step] if a.ndim else a)
            h.update(block.view(np.uint8).reshape(-1).data)
    return h.hexdigest()


def _release(path: Path) -> None:
    """Give up this process's lock on output directory ``path`` (if it holds it): the
    lock file goes, then its lock."""
    import fcntl

    with _HELD_LOCK:
        fd = _HELD.pop(os.path.realpath(path), None)
        if fd is not None:
            (path / LOCK).unlink(missing_ok=True)
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


# --- control files are data: validated before use -------------------------------------------

# what reading a damaged part may raise: a bad header (ValueError), a cut zip
# (BadZipFile), a file gone (OSError), a missing member (KeyError), a short read (EOFError)
_UNREADABLE: tuple[type[BaseException], ...] = (OSError, ValueError, KeyError, EOFError,
                                                zipfile.BadZipFile)


def _hostname() -> str:
    import socket

    return socket.gethostname()


def _is_int(v: Any, least: int = 0) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= least


def _structure_ok(st: Any) -> bool:
    """Whether ``st`` is a structure as :func:`flatten_outputs` describes one."""
    if not isinstance(st, dict) or st.get("kind") not in _KINDS:
        return False
    leaves = st.get("leaves")
    if not isinstance(leaves, list) or not leaves or (st["kind"] == "array"
                                                      and len(leaves) != 1):
        return False
    for leaf in leaves:
        if not (isinstance(leaf, dict) and isinstance(leaf.get("name"), str)
                and isinstance(leaf.get("dtype"), str) and isinstance(leaf.get("shape"), list)
                and all(_is_int(d) for d in leaf["shape"])):
            return False
        try:
            if np.dtype(leaf["dtype"]).hasobject:
                return False
        except TypeError:
            return False
    return True


def _part_files(index: int) -> tuple[str, str]:
    stem = part_stem(index)
    return f"{stem}.npy", f"{stem}.npz"


def _sidecar_ok(meta: Any, index: int) -> bool:
    """Whether a part's sidecar is whole: its own index, its own file's name (``.npy``
    for one output, ``.npz`` for several), counts and a digest."""
    return (isinstance(meta, dict) and meta.get("index") == index
            and meta.get("file") in _part_files(index)
            and _is_int(meta.get("rows")) and _is_int(meta.get("bytes"), 1)
            and isinstance(meta.get("xxh3"), str) and _structure_ok(meta.get("structure"))
            and meta["file"].endswith(".npy") == (meta["structure"]["kind"] == "array"))


def _manifest_problem(text: bytes) -> str | None:
    """What is wrong with a manifest's text (None: nothing): its fields, and once it
    says complete, its table of parts (each part's own file, rows in order)."""
    try:
        m = json.loads(text)
    except ValueError as err:
        return f"not JSON: {err}"
    if not isinstance(m, dict):
        return "not a JSON object"
    if not isinstance(m.get("fingerprint", {}), dict) or not isinstance(m.get("model", {}),
                                                                         dict):
        return "its fingerprint or model is not an object"
    if not m.get("complete"):
        return None
    st = m.get("structure")
    if st is not None and not _structure_ok(st):
        return "its output structure is not one a model's outputs have"
    parts, rows = m.get("parts"), m.get("rows")
    if not isinstance(parts, list) or not _is_int(rows):
        return "it says complete without a table of parts and rows"
    start = 0
    for i, part in enumerate(parts):
        if not (isinstance(part, dict) and part.get("index") == i
                and part.get("file") in _part_files(i) and part.get("start") == start
                and _is_int(part.get("rows")) and _is_int(part.get("bytes"), 1)
                and isinstance(part.get("xxh3"), str)):
            return f"its entry for part {i} is not a part's (index, file, start, rows, digest)"
        start += part["rows"]
    if start != rows:
        return f"its parts hold {start} rows, it says {rows}"
    if st is None and rows:
        return "it has rows but no output structure"
    return None


def check_same_job(where: str, manifest: Mapping[str, Any], fingerprint: Mapping[str, Any],
                   model: Mapping[str, Any]) -> None:
    """Refuse (:class:`PredictionsMismatchError`) an output whose manifest is another
    job's: another format, input, batch size or model. ``where`` names the output."""
    old = manifest.get("fingerprint") or {}
    if manifest.get("format") != FORMAT:
        raise PredictionsMismatchError(f"predict: {where} has a manifest of another format "
                                       f"({manifest.get('format')!r}, expected {FORMAT})")
    for size in ("rows", "batches"):
        if old.get(size) is not None and fingerprint.get(size) is not None \
                and old[size] != fingerprint[size]:
            raise PredictionsMismatchError(
                f"predict: the input's length changed since {where} was started: "
                f"{old[size]} {size} then, {fingerprint[size]} now; predict into a new "
                "directory (or remove it) to start over")
    if old.get("batch_size") != fingerprint.get("batch_size"):
        raise PredictionsMismatchError(
            f"predict: {where} was started with batch_size={old.get('batch_size')} "
            f"(its parts are batches), now {fingerprint.get('batch_size')}: give "
            f"batch_size={old.get('batch_size')} to continue it, or another output=")
    if dict(old) != dict(fingerprint):
        raise PredictionsMismatchError(
            f"predict: {where} holds the predictions of another input (fingerprint "
            f"{old} there, {dict(fingerprint)} now); give another output= or remove it")
    if dict(manifest.get("model") or {}) != dict(model):
        raise PredictionsMismatchError(
            f"predict: {where} holds the predictions of another model "
            f"({manifest.get('model')} there, {dict(model)} now); give another output= or "
            "remove it")


# --- writing ---------------------------------------------------------------------------------


def same_structure(known: dict[str, Any] | None, structure: dict[str, Any], index: int,
                   where: Path | str) -> dict[str, Any]:
    """The output structure of batch ``index``, which must be the earlier batches'
    (``known``; None: the first) in every part of ``where``.

    >>> s = {"kind": "array"}
    >>> same_structure(None, s, 0, "out") == s
    True
    """
    if known is not None and known != structure:
        raise PredictionsCorruptError(
            f"predict: batch {index}'s outputs are {_describe(structure)}, the earlier "
            f"batches' {_describe(known)} (in {where}): a model must predict the same "
            "structure, dtypes and per-row shapes for every batch")
    return structure


def final_manifest(manifest: dict[str, Any], sidecars: Mapping[int, dict[str, Any] | None],
                   parts: int, where: Path | str) -> dict[str, Any]:
    """``manifest`` completed over parts ``0 .. parts-1`` from their sidecars (missing or
    None, damaged: refused): which rows each part holds, the structure, the rows.

    >>> m = final_manifest({}, {0: {"file": "p.npy", "rows": 2, "bytes": 9, "xxh3": "x",
    ...                             "structure": None}}, 1, "out")
    >>> (m["complete"], m["rows"], m["parts"][0]["start"])
    (True, 2, 0)
    """
    table, start = [], 0
    for i in range(parts):
        meta = sidecars.get(i)
        if meta is None:
            raise PredictionsIncompleteError(
                f"predict: part {i} of {parts} is missing or damaged in {where}: "
                "run again with the same output= to write it")
        table.append({"index": i, "file": meta["file"], "start": start,
                      "rows": meta["rows"], "bytes": meta["bytes"], "xxh3": meta["xxh3"]})
        start += meta["rows"]
        manifest.setdefault("structure", meta["structure"])
    manifest.update({"complete": True, "rows": start, "parts": table})
    manifest.setdefault("structure", None)  # no rows at all: nothing to describe
    return manifest



class PartStore:
    """One output directory: what each process of a streamed predict writes through.

    :meth:`begin` (every process; the chief's checks decide) makes the directory ours or
    refuses it; :meth:`complete_parts` says which global batches need no work;
    :meth:`write_part` writes one; the chief's :meth:`finish` writes the final manifest.
    """

    #: seconds between two flushes of the written parts to disk (the progress that
    #: survives a machine's crash; a process's kill loses nothing written)
    DURABLE_SECONDS = 10.0

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._structure: dict[str, Any] | None = None
        self._durable_at = time.monotonic()
        self._dirty = False  # parts written since the last flush

    @property
    def location(self) -> Path:
        """Where the output is (for messages, and what ``load_predictions`` reads)."""
        return self.path

    def sync(self) -> None:
        """Make every part written so far durable (one flush of the filesystem)."""
        if self._dirty:
            _syncfs(self.path)
            self._dirty = False
        self._durable_at = time.monotonic()

    # the chief, before any process writes
    def begin(self, fingerprint: Mapping[str, Any], model: Mapping[str, Any]) -> None:
        """Create the directory and its manifest, or check that its manifest is this job's
        (same input fingerprint and model); sweep temporary files a killed run left.

        Takes the directory's lock file (:data:`LOCK`, held by this process until
        :meth:`finish` or its end): a second run into a directory that a live run is
        writing is refused (:class:`PredictionsBusyError`), never sweeping its files."""
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock()
        manifest = self.read_manifest()
        if manifest is None:
            stray = [p.name for p in self.path.iterdir() if _PART.match(p.name)]
            if stray:
                raise PredictionsMismatchError(
                    f"predict: output directory {self.path} holds part files ({stray[0]}, ...) "
                    "but no manifest.json: not this job's; give another output= or remove them")
            try:
                write_atomic(self.path / MANIFEST, _dumps({
                    "format": FORMAT, "complete": False, "fingerprint": dict(fingerprint),
                    "model": dict(model)}))
            except OSError as err:
                raise _disk_full(err, self.path, MANIFEST) from err
        else:
            self._check_same_job(manifest, fingerprint, model)
            self._structure = manifest.get("structure")
        for p in self.path.iterdir():  # a killed writer's temporary files
            if p.name.startswith(".part-") and p.name.endswith(".tmp"):
                p.unlink(missing_ok=True)

    def _check_same_job(self, manifest: Mapping[str, Any], fingerprint: Mapping[str, Any],
                        model: Mapping[str, Any]) -> None:
        check_same_job(f"output directory {self.path}", manifest, fingerprint, model)

    def _lock(self) -> None:
        import fcntl  # here: `import det_sdk` stays light (and POSIX only where it runs)

        key = os.path.realpath(self.path)
        lock = self.path / LOCK
        with _HELD_LOCK:
            if key in _HELD:
                return
            while True:
                fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as err:
                    holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
                    os.close(fd)
                    if err.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
                    raise PredictionsBusyError(
                        f"predict: output directory {self.path} is being written by another "
                        f"run ({holder or 'a process'}, holding {LOCK}): wait for it to end, "
                        "or give another output=") from None
                try:  # the file a finished run removed after we opened it: again
                    same = os.stat(lock).st_ino == os.fstat(fd).st_ino
                except FileNotFoundError:
                    same = False
                if same:
                    break
                os.close(fd)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"process {os.getpid()} on {_hostname()}\n".encode(), 0)
            _HELD[key] = fd

    def release(self) -> None:
        """Let another run write the directory (done by :meth:`finish`, and by
        :func:`gather_failures` when the run failed)."""
        _release(self.path)

    def read_manifest(self) -> dict[str, Any] | None:
        """The manifest, or None where there is none yet; a damaged one (not JSON, not
        an object, not the format's fields) is refused naming it, never a crash."""
        try:
            text = (self.path / MANIFEST).read_bytes()
        except FileNotFoundError:
            return None
        problem = _manifest_problem(text)
        if problem:
            raise PredictionsCorruptError(
                f"predict: {self.path / MANIFEST} is damaged ({problem}): nothing tells "
                "which job its parts are; remove the directory (or give another output=) "
                "to predict again")
        return json.loads(text)

    def read_sidecar(self, index: int) -> dict[str, Any] | None:
        """Part ``index``'s sidecar when it is whole and names this part's own file in
        the directory; None when it is absent or damaged (the part is then written
        again: its ``file`` field is never followed anywhere else)."""
        try:
            meta = json.loads((self.path / f"{part_stem(index)}.json").read_bytes())
        except (OSError, ValueError):
            return None
        return meta if _sidecar_ok(meta, index) else None

    def structure(self) -> dict[str, Any] | None:
        """The output structure the parts written so far have (None before the first;
        damaged sidecars are passed over)."""
        if self._structure is None:
            for p in sorted(self.path.glob("part-*.json")):
                m = _PART.match(p.name)
                meta = self.read_sidecar(int(m.group(1))) if m else None
                if meta is not None:
                    self._structure = meta["structure"]
                    break
        return self._structure

    def written_parts(self) -> set[int]:
        """The global batches with a sidecar, complete or not (an unsized input's parts
        are found so: :meth:`complete_parts` checks them)."""
        return {int(m.group(1)) for p in self.path.glob("part-*.json")
                if (m := _PART.match(p.name))}

    # every process
    def complete_parts(self, indices: Iterable[int], *, verify: bool = True) -> set[int]:
        """Those of ``indices`` whose part is complete (its sidecar exists, its bytes match).
        A part that does not verify is removed, to be written again."""
        done = set()
        for i in indices:
            if self._is_complete(i, verify):
                done.add(i)
        return done

    def _is_complete(self, index: int, verify: bool) -> bool:
        stem = part_stem(index)
        meta = self.read_sidecar(index)
        ok = meta is not None
        if meta is not None:
            try:
                data = self.path / meta["file"]  # the part's own name (read_sidecar)
                ok = data.stat().st_size == meta["bytes"]
                if ok and verify:
                    leaves = _read_leaves(data)
                    ok = (_digest(leaves) == meta["xxh3"]
                          and all(len(a) == meta["rows"] for a in leaves))
            except _UNREADABLE:
                ok = False
        if not ok:  # a damaged part (or sidecar): written again
            for name in (f"{stem}.json", f"{stem}.npy", f"{stem}.npz"):
                (self.path / name).unlink(missing_ok=True)
        return ok

    def write_part(self, index: int, outputs: Any) -> int:
        """Write global batch ``index``'s predictions (atomically: complete or absent).
        Returns its number of rows."""
        structure, leaves = flatten_outputs(outputs)
        self._structure = same_structure(self.structure(), structure, index, self.path)
        stem = part_stem(index)
        name = f"{stem}.npy" if structure["kind"] == "array" else f"{stem}.npz"
        try:
            size = _write_leaves(self.path / name, structure, leaves)
        except OSError as err:  # the temporary file is gone: the part is absent
            raise _disk_full(err, self.path, name) from err
        try:
            write_atomic(self.path / f"{stem}.json", _dumps({
                "index": index, "file": name, "rows": len(leaves[0]), "bytes": size,
                "xxh3": _digest(leaves), "structure": structure}), durable=False)
            self._dirty = True
            if time.monotonic() - self._durable_at >= self.DURABLE_SECONDS:
                self.sync()
        except OSError as err:  # no sidecar: the part is not complete; take it away too
            (self.path / name).unlink(missing_ok=True)
            raise _disk_full(err, self.path, f"{stem}.json") from err
        return len(leaves[0])

    # the chief, after every process wrote its parts
    def finish(self, parts: int) -> dict[str, Any]:
        """Write the final manifest over parts ``0 .. parts-1`` (all must be complete):
        which rows each part holds, the output structure and the total rows."""
        manifest = final_manifest(self.read_manifest() or {},
                                  {i: self.read_sidecar(i) for i in range(parts)}, parts,
                                  self.path)
        try:
            _syncfs(self.path)  # every part on disk before the manifest says complete
            write_atomic(self.path / MANIFEST, _dumps(manifest))
        except OSError as err:  # the old manifest stays: a rerun writes the final one
            raise _disk_full(err, self.path, MANIFEST) from err
        self.release()
        return manifest


#: a streamed predict's output: a directory's or a bucket's store (the same methods)
OutputStore = Union[PartStore, "BucketPartStore"]


# --- what every front's streamed predict shares (det_sdk.keras, det_sdk.pytorch) ----------


@dataclass(frozen=True)
class StreamedPredictions:
    """What a streamed ``context.predict`` returns (on every process)."""

    #: the output: a directory, or an ``s3://``/``gs://``/``az://`` URL (either is what
    #: det_sdk.load_predictions reads)
    path: Path | str
    rows: int  #: rows predicted in all, this run's and earlier runs'
    parts: int  #: part files (global batches)
    resumed: int  #: parts an earlier run had written, kept as they were


#: the object-store URLs an ``output=`` may be (a ``pathlib.Path`` of one has lost a slash:
#: ``s3:/bucket``; it is a URL all the same, never a folder named ``s3:``)
_URL = re.compile(r"^(s3|gs|az):/+(.*)$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def output_url(output: str | os.PathLike[str]) -> str | None:
    """``output`` as an object-store URL (``s3://bucket/prefix``, ``gs://``, ``az://``);
    None when it is a path. Another scheme (``http://``, ``file://``) is refused.

    >>> output_url("s3://preds/job-1/"), output_url(Path("gs://b/p")), output_url("out")
    ('s3://preds/job-1', 'gs://b/p', None)
    """
    text = os.fspath(output)
    m = _URL.match(text)
    if m is None:
        if _SCHEME.match(text):
            raise UsageError(f"predict: output={text!r} is not a path nor an s3://, gs:// or "
                             "az:// URL (bucket/prefix)")
        return None
    where = m.group(2).strip("/")
    if not where.split("/", 1)[0]:
        raise UsageError(f"predict: output={text!r} names no bucket: write "
                         f"{m.group(1)}://<bucket>/<prefix>")
    return f"{m.group(1)}://{where}"


def resolve_output(core: Any, output: str | os.PathLike[str]) -> Path | str:
    """Where ``output`` is: an object-store URL as it is (normalized: :func:`output_url`);
    absolute paths as given; relative ones under the trial's kept files
    (``<host_path>/trial_files/<experiment>/trial_<id>``) on the cluster, under
    ``<host_path>/job_files/<allocation>`` in a generic job, the working directory
    locally. ``core``: the task's ``det_sdk.core.Context``."""
    url = output_url(output)
    if url is not None:
        return url
    path = Path(output).expanduser()
    if path.is_absolute():
        return path
    if core.files_dir is not None:
        return Path(core.files_dir) / path
    info = core.info if core.local_run_dir is None else None  # a local run's is no cluster's
    host_path = ((getattr(info, "config", None) or {}).get("checkpoint_storage") or {}).get(
        "host_path") if info is not None else None
    if host_path and info is not None:
        return Path(host_path) / "job_files" / str(info.allocation_id) / path
    return Path.cwd() / path


def output_store(core: Any, output: str | os.PathLike[str]) -> OutputStore:
    """The store a streamed predict writes ``output`` through, not begun: a directory's
    :class:`PartStore`, or for a URL the bucket's
    (:class:`det_sdk.predictions_buckets.BucketPartStore`, with the credentials of the
    run's ``checkpoint_storage`` where it names the same bucket). The one place that
    tells the two apart: everything after it calls the same methods."""
    where = resolve_output(core, output)
    if isinstance(where, Path):
        return PartStore(where)
    from det_sdk.predictions_buckets import BucketPartStore

    checkpoints = getattr(core, "checkpoint", None)  # the run's storage, its credentials
    return BucketPartStore.open(where, getattr(checkpoints, "storage", None))


def open_store(dist: Any, store: OutputStore, fingerprint: Mapping[str, Any],
               model: Mapping[str, Any]) -> OutputStore:
    """The chief begins ``store`` (:meth:`PartStore.begin`); every process gets it, or
    the chief's refusal (another job's output, another run holding it, a damaged
    manifest, a full disk) raised alike, so that none waits on another. ``dist``: a
    DistributedContext (``is_chief``, ``broadcast``)."""
    problem: tuple[str, str] | None = None
    if dist.is_chief:
        try:
            store.begin(fingerprint, model)
        except PredictionsDiskFullError as err:
            problem = ("full", str(err.strerror))
        except (PredictionsMismatchError, PredictionsCorruptError, StorageError) as err:
            problem = (type(err).__name__, str(err))
    problem = dist.broadcast(problem)
    if problem is not None:
        kind, message = problem
        if kind == "full":
            raise PredictionsDiskFullError(errno.ENOSPC, message)
        raise {"PredictionsBusyError": PredictionsBusyError,
               "PredictionsCorruptError": PredictionsCorruptError,
               "StorageError": StorageError}.get(kind, PredictionsMismatchError)(message)
    return store


def gather_failures(dist: Any, store: OutputStore, failure: BaseException | None,
                    local: int, resumed: int) -> list[tuple[str | None, int, int]]:
    """Every process's (failure, parts it holds, parts kept from an earlier run), after
    its loop, failed or not (so that none waits on a dead one); raises this process's
    failure, or a :class:`~det_sdk.errors.StateError` naming another's. A failed run
    gives up the output's lock (:data:`LOCK`) here."""
    results: list[tuple[str | None, int, int]] = dist.allgather(
        (repr(failure) if failure else None, local, resumed))
    if failure is not None or any(e for e, _, _ in results):
        store.release()  # the run is over: the output is free for the next one
    if failure is not None:
        raise failure
    failed = [(r, e) for r, (e, _, _) in enumerate(results) if e]
    if failed:
        raise StateError(f"context.predict: process {failed[0][0]} failed ({failed[0][1]}); "
                         f"the parts written in {store.location} stay valid: run again to "
                         "finish them")
    return results


class StopAsked:
    """Whether a streamed predict stops after a step because the master asked the task
    to stop (``det job pause``, a preemption): the parts written are the progress, and a
    run into the same output resumes after them.

    One process reads the master's request after every step. N processes meet every
    ``SYNC_STEPS`` steps (a collective of the chief's flag): all stop after the same step,
    so each process must walk the same steps (batches it has none of included). A
    process that failed walks on to the next meeting without predicting, where every
    process ends (``failed``): none is left waiting in a collective the failed one
    never joins.

    ``preempt``: the task's ``core_context.preempt`` (its ``requested()``: the chief's
    answer is the master's, the others' False).

    >>> class Dist: size, is_chief = 1, True
    >>> class Asked:
    ...     def requested(self): return True
    >>> StopAsked(Dist(), Asked()).after(0)
    True
    """

    SYNC_STEPS = 10

    def __init__(self, dist: Any, preempt: Any) -> None:
        self.dist, self.preempt = dist, preempt
        self.carried: list[Any] = []  # what each process brought to the last meeting
        self.asked = False  # the master asked (not: a process failed)

    def meets(self, step: int) -> bool:
        """Whether the processes meet after ``step`` (always, for one process)."""
        return self.dist.size == 1 or (step + 1) % self.SYNC_STEPS == 0

    def after(self, step: int, failed: bool = False, carry: Any = None) -> bool:
        """After step ``step`` (0, 1, ...): True on every process when to stop, asked by
        the master or because a process has ``failed``. ``carry``: this process's share
        of what the meeting gathers (``carried``: every process's, by rank)."""
        if self.dist.size == 1:
            self.asked, self.carried = bool(self.preempt.requested()), [carry]
            return failed or self.asked
        if not self.meets(step):
            return False
        flags = self.dist.allgather((bool(self.preempt.requested())
                                     if self.dist.is_chief else False, failed, carry))
        self.asked, self.carried = bool(flags[0][0]), [c for _, _, c in flags]
        return self.asked or any(f for _, f, _ in flags)


class PartWriter:
    """Writes parts on a thread, a bounded number of batches behind the predictions: the
    disk writes overlap the next batches' predictions, memory holds ``depth`` batches."""

    def __init__(self, store: OutputStore, depth: int = 2) -> None:
        self.store = store
        self.rows = 0
        self.error: BaseException | None = None
        self._q: queue.Queue[tuple[int, Any] | None] = queue.Queue(maxsize=depth)
        self._thread = threading.Thread(target=self._run, daemon=True, name="det-predict-write")
        self._thread.start()

    def _run(self) -> None:
        while (item := self._q.get()) is not None:
            if self.error is None:
                try:
                    self.rows += self.store.write_part(*item)
                except BaseException as err:  # re-raised on the main thread
                    self.error = err

    def put(self, index: int, outputs: Any) -> None:
        """Queue global batch ``index``'s outputs (waits while ``depth`` are queued);
        raises the writer's error, once it has one."""
        if self.error is not None:
            raise self.error
        self._q.put((index, outputs))

    def close(self) -> None:
        """Write what is queued, make it durable and stop; raises the writer's error."""
        self._q.put(None)
        self._thread.join()
        if self.error is None:
            try:  # each process's own parts (another machine's, on a shared filesystem)
                self.store.sync()
            except OSError as err:
                self.error = _disk_full(err, Path(self.store.location),
                                        "the parts (flushing them)")
        if self.error is not None:
            raise self.error


def _describe(structure: Mapping[str, Any]) -> str:
    return ", ".join(f"{leaf['name']}: {np.dtype(leaf['dtype']).name}{tuple(leaf['shape'])}"
                     for leaf in structure["leaves"])


def _dumps(obj: Any) -> str:
    return json.dumps(obj, indent=1, sort_keys=True)


def _write_leaves(target: Path, structure: Mapping[str, Any], leaves: list[np.ndarray]) -> int:
    """Write a part file atomically (temporary name, rename); returns its size. Not
    fsynced: :meth:`PartStore.sync` flushes the parts together, now and then."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "xb") as f:
            if structure["kind"] == "array":
                np.lib.format.write_array(f, leaves[0], allow_pickle=False)
            else:  # uncompressed: np.savez's members are .npy files, read back in place
                names = [leaf["name"] for leaf in structure["leaves"]]
                np.savez(f, **dict(zip(names, leaves)))
            f.flush()
            size = f.tell()
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return size


def _syncfs(path: Path) -> None:
    """Flush the filesystem holding ``path`` to disk: one ``syncfs(2)`` (Linux) instead
    of an fsync per file; ``sync()`` where there is none."""
    import ctypes  # here: `import det_sdk` stays light

    libc = ctypes.CDLL(None, use_errno=True)
    syncfs = getattr(libc, "syncfs", None)
    if syncfs is not None:
        fd = os.open(path, os.O_RDONLY)
        try:
            if syncfs(fd) == 0:
                return
            err = ctypes.get_errno()
        finally:
            os.close(fd)
        raise _disk_full(CheckpointWriteError(err, f"predict: flushing {path} to disk: "
                                              f"{os.strerror(err)}"), path, "its parts")
    os.sync()


def _read_leaves(path: Path, mmap: bool = False) -> list[np.ndarray]:
    if path.suffix == ".npy":
        return [np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)]
    with np.load(path, allow_pickle=False) as z:
        return [z[k] for k in z.files]


# --- reading ---------------------------------------------------------------------------------


def complete_manifest(read: Callable[[], bytes], where: Path | str,
                      kind: str) -> dict[str, Any]:
    """The final manifest ``read()`` returns for the output at ``where``, refused when
    absent (not ``kind``), damaged, or not complete (the job stopped before its end)."""
    try:
        text = read()
    except FileNotFoundError:
        raise PredictionsIncompleteError(
            f"load_predictions: {where} has no {MANIFEST}: not {kind} writes one)") from None
    problem = _manifest_problem(text)
    if problem:
        raise PredictionsCorruptError(f"load_predictions: {where}/{MANIFEST} is damaged "
                                      f"({problem})")
    manifest: dict[str, Any] = json.loads(text)
    if not manifest.get("complete"):
        raise PredictionsIncompleteError(
            f"load_predictions: the predictions in {where} are not complete: the job stopped "
            "before its end; run it again with the same output= to finish them")
    return manifest


def load_predictions(path: str | os.PathLike[str], *, mmap: bool = False,
                     storage: Mapping[str, Any] | None = None) -> Any:
    """The predictions a streamed ``context.predict(..., output=path)`` wrote, in the
    input's order: one array, or a list/tuple/dict of arrays as the model returns them.

    ``path`` may be the ``s3://``, ``gs://`` or ``az://`` URL the predict wrote to: the
    parts are downloaded and verified alike. Its credentials: ``storage`` (a
    ``checkpoint_storage`` mapping, used where it names the same bucket or container),
    else the environment's (``AWS_*``, ``GOOGLE_APPLICATION_CREDENTIALS`` /
    ``STORAGE_EMULATOR_HOST``, ``AZURE_STORAGE_CONNECTION_STRING``). With ``mmap=True``
    the parts are written into one temporary ``.npy`` per output, which is mapped and
    then unlinked: no file is left behind, and its disk space is freed when the arrays
    are.

    ``mmap=True`` returns memory-mapped arrays, for outputs larger than memory: on the
    first such read the parts are copied, in order, into one ``combined-<output>.npy``
    per output in the directory (a plain ``.npy`` any tool opens; later reads map it).
    Without it the arrays are read into memory, each part once.

    Every read is verified against the digests the writer stored (xxh3, about 10 GB/s):
    each part against the manifest's table, a combined file against its own sidecar
    (``combined-<output>.json``; a combined file that does not verify is made again from
    the parts). A damaged part raises :class:`PredictionsCorruptError` naming it: run
    the job again with the same ``output=``, which writes it again.

    Raises :class:`PredictionsIncompleteError` while parts are missing (the job has
    not finished: rerun it to complete them).

    Example::

        preds = det_sdk.load_predictions("predictions")           # numpy array
        big = det_sdk.load_predictions("predictions", mmap=True)  # np.memmap
        preds = det_sdk.load_predictions("s3://bucket/job-7")      # from a bucket
    """
    url = output_url(path)
    if url is not None:
        from det_sdk.predictions_buckets import load_from_bucket

        return load_from_bucket(url, mmap=mmap, storage=storage)
    root = Path(path)
    manifest = complete_manifest(lambda: (root / MANIFEST).read_bytes(), root,
                                 "a predictions directory (context.predict(..., output=DIR)")
    return assemble(manifest, lambda k, shape, dtype: _combined(root, manifest, k, shape, dtype)
                    if mmap else None, lambda part: _verified_part(root, part,
                                                                   manifest["structure"]))


def assemble(manifest: Mapping[str, Any],
             mapped: Any, verified_part: Any) -> Any:
    """The predictions of a complete ``manifest`` as the model returned them: output
    ``k`` from ``mapped(k, shape, dtype)`` (a memory-mapped array; None: read the parts
    into memory) or else from ``verified_part(part)`` (its verified arrays)."""
    structure = manifest["structure"]
    if structure is None:
        return np.empty((0,))
    total = manifest["rows"]
    shapes = [((total, *leaf["shape"]), np.dtype(leaf["dtype"]))
              for leaf in structure["leaves"]]
    maps = [mapped(k, shape, dtype) for k, (shape, dtype) in enumerate(shapes)]
    if all(m is not None for m in maps):
        outs = maps
    else:
        outs = [np.empty(shape, dtype) for shape, dtype in shapes]
        for part in manifest["parts"]:
            for out, leaf in zip(outs, verified_part(part)):
                out[part["start"]:part["start"] + part["rows"]] = leaf
    names = [leaf["name"] for leaf in structure["leaves"]]
    kind = structure["kind"]
    if kind == "array":
        return outs[0]
    if kind == "dict":
        return dict(zip(names, outs))
    return outs if kind == "list" else tuple(outs)


def _verified_part(root: Path, part: Mapping[str, Any],
                   structure: Mapping[str, Any]) -> list[np.ndarray]:
    """A part's arrays (memory-mapped where it is a ``.npy``) once its size, layout and
    digest match the manifest's entry; :class:`PredictionsCorruptError` naming it if not."""
    data = root / part["file"]
    try:
        size = data.stat().st_size
        why = f"{size} bytes, the manifest says {part['bytes']}" \
            if size != part["bytes"] else None
        leaves = [] if why else _read_leaves(data, mmap=True)
    except _UNREADABLE as err:
        why, leaves = f"unreadable: {type(err).__name__}: {err}", []
    return check_part(str(data), part, structure, leaves, why)


def check_part(name: str, part: Mapping[str, Any], structure: Mapping[str, Any],
               leaves: list[np.ndarray], why: str | None) -> list[np.ndarray]:
    """``leaves`` (part ``part``'s arrays, read from ``name``) once their layout and
    digest match the manifest's entry; :class:`PredictionsCorruptError` naming the part
    if not, or if reading it found ``why``."""
    data = name
    if why is None:
        expected = [(np.dtype(leaf["dtype"]), (part["rows"], *leaf["shape"]))
                    for leaf in structure["leaves"]]
        if [(a.dtype, a.shape) for a in leaves] != expected:
            why = "its arrays are not the shape and dtype the manifest says"
        elif _digest(leaves) != part["xxh3"]:
            why = "its bytes do not match the digest stored when it was written"
    if why is not None:
        raise PredictionsCorruptError(
            f"load_predictions: part {part['index']} ({data}) is damaged: {why}; run the "
            "job again with the same output= to write it again")
    return leaves


def _parts_key(manifest: Mapping[str, Any]) -> str:
    """What a combined file was made from: the digests of the parts, in order."""
    return xxhash.xxh3_64_hexdigest(" ".join(p["xxh3"] for p in manifest["parts"]).encode())


def _file_digest(arr: np.ndarray) -> str:
    """xxh3 of a (memory-mapped) array's bytes, read in blocks of 64 MiB."""
    h = xxhash.xxh3_64()
    flat = arr.reshape(-1).view(np.uint8) if arr.size else np.empty(0, np.uint8)
    step = 64 << 20
    for i in range(0, len(flat), step):
        h.update(np.ascontiguousarray(flat[i:i + step]).data)
    return h.hexdigest()


def _combined(root: Path, manifest: Mapping[str, Any], k: int, shape: tuple[int, ...],
              dtype: np.dtype) -> np.ndarray:
    """Output ``k`` as one memory-mapped ``.npy``, made from the verified parts on
    first use, verified on every later one (its sidecar: the parts it was made from
    and its digest); made again when it does not verify."""
    name = manifest["structure"]["leaves"][k]["name"]
    target = root / f"combined-{name}.npy"
    sidecar = root / f"combined-{name}.json"
    key = _parts_key(manifest)
    if target.exists():
        try:
            meta = json.loads(sidecar.read_bytes())
            arr = np.load(target, mmap_mode="r")
            if (isinstance(meta, dict) and meta.get("parts") == key
                    and arr.shape == shape and arr.dtype == dtype
                    and meta.get("xxh3") == _file_digest(arr)):
                return arr
        except _UNREADABLE:
            pass
        target.unlink(missing_ok=True)  # stale or damaged: made again from the parts
    structure = manifest["structure"]
    tmp = root / f".combined-{name}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
    try:
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=shape)
        h = xxhash.xxh3_64()
        for part in manifest["parts"]:
            leaf = np.ascontiguousarray(_verified_part(root, part, structure)[k])
            out[part["start"]:part["start"] + part["rows"]] = leaf
            h.update(leaf.reshape(-1).view(np.uint8).data if leaf.size else b"")
        out.flush()
        del out
        fsync_path(tmp)
        write_atomic(sidecar, _dumps({"parts": key, "xxh3": h.hexdigest()}))
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return np.load(target, mmap_mode="r")
