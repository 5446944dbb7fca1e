"""The directory store of a streamed predict: :class:`PartStore`, one output directory
that every process writes its parts into, with the lock file that keeps a second run out.

Durability is checkpointed by time, not per part: every :attr:`PartStore.DURABLE_SECONDS`
(10 s) the writer flushes the output's filesystem once (``syncfs``), and each process
again when it has written its last part, before the final manifest (fsynced) says the
job is complete. A process killed loses nothing written (the page cache outlives it); a
machine that crashes loses at most the parts since the last flush, which the rerun's
digest check finds and writes again. Four fsyncs a part (file, sidecar, and the
directory after each) took 0.4-1.3 s of the writer's 1.6-2.5 s runs of 49 parts
(scripts/bench/bench_predict_progress.py).
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from det_sdk.atomic import write_atomic
from det_sdk.errors import CheckpointWriteError
from det_sdk.predictions.errors import (
    PredictionsBusyError,
    PredictionsCorruptError,
    PredictionsMismatchError,
    disk_full,
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

__all__ = ["PartStore", "read_leaves"]

# this process's locks, by directory: a second predict into the same directory from the
# same process (a rerun after a failure in a notebook) continues under the same lock
_HELD: dict[str, int] = {}
_HELD_LOCK = threading.Lock()


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


def _hostname() -> str:
    import socket

    return socket.gethostname()


class PartStore(OutputStore):
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
            stray = [p.name for p in self.path.iterdir() if PART_FILE.match(p.name)]
            if stray:
                raise PredictionsMismatchError(
                    f"predict: output directory {self.path} holds part files ({stray[0]}, ...) "
                    "but no manifest.json: not this job's; give another output= or remove them")
            try:
                write_atomic(self.path / MANIFEST, dumps({
                    "format": FORMAT, "complete": False, "fingerprint": dict(fingerprint),
                    "model": dict(model)}))
            except OSError as err:
                raise disk_full(err, self.path, MANIFEST) from err
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
        problem = manifest_problem(text)
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
        return meta if sidecar_ok(meta, index) else None

    def written_parts(self) -> set[int]:
        """The global batches with a sidecar, complete or not (an unsized input's parts
        are found so: :meth:`complete_parts` checks them)."""
        return {int(m.group(1)) for p in self.path.glob("part-*.json")
                if (m := PART_FILE.match(p.name))}

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
                    leaves = read_leaves(data)
                    ok = (digest_leaves(leaves) == meta["xxh3"]
                          and all(len(a) == meta["rows"] for a in leaves))
            except UNREADABLE:
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
            raise disk_full(err, self.path, name) from err
        try:
            write_atomic(self.path / f"{stem}.json", dumps({
                "index": index, "file": name, "rows": len(leaves[0]), "bytes": size,
                "xxh3": digest_leaves(leaves), "structure": structure}), durable=False)
            self._dirty = True
            if time.monotonic() - self._durable_at >= self.DURABLE_SECONDS:
                self.sync()
        except OSError as err:  # no sidecar: the part is not complete; take it away too
            (self.path / name).unlink(missing_ok=True)
            raise disk_full(err, self.path, f"{stem}.json") from err
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
            write_atomic(self.path / MANIFEST, dumps(manifest))
        except OSError as err:  # the old manifest stays: a rerun writes the final one
            raise disk_full(err, self.path, MANIFEST) from err
        self.release()
        return manifest


def _write_leaves(target: Path, structure: Mapping[str, Any], leaves: list[np.ndarray]) -> int:
    """Write a part file atomically (temporary name, rename); returns its size. Not
    fsynced: :meth:`PartStore.sync` flushes the parts together, now and then."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "xb") as f:
            encode_leaves(f, structure, leaves)
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
        raise disk_full(CheckpointWriteError(err, f"predict: flushing {path} to disk: "
                                              f"{os.strerror(err)}"), path, "its parts")
    os.sync()


def read_leaves(path: Path, mmap: bool = False) -> list[np.ndarray]:
    """A part file's arrays (``mmap``: a ``.npy`` memory-mapped, not read)."""
    if path.suffix == ".npy":
        return [np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)]
    with np.load(path, allow_pickle=False) as z:
        return [z[k] for k in z.files]
