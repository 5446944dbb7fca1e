"""What a task wrote into its working directory, kept after the directory goes.

A trial or job runs in its own unpacked copy of the uploaded directory
(``<data>/<trials|jobs>/<id>/workdir``), deleted when the task ends. Files the task
wrote there (a job's ``predictions.npy``, a GAN's sample images) would go with it: when
the task ends, the files it created or changed are first copied into
``<data>/<trials|jobs>/<id>/files/`` (same relative paths), which the master keeps and
serves (``GET /api/v1/{trials,jobs}/{id}/files``, ``det trial download``, ``det job
download``).

"Created or changed" is told by modification time: unpacking marks the working
directory (:func:`mark_unpacked`), and a regular file modified after that mark is the
task's. Unpacked files keep the mtime their archive gave them (the user's, earlier).
Python's ``__pycache__`` is left out. Bounded: at most :data:`MAX_KEPT_BYTES` in all
(smallest files first, so one huge file does not push out the many small ones); what
does not fit is listed in ``files/NOT_KEPT.txt`` and the returned note says so.

Whole or not at all: the copy runs after the task has ended (in the master's disk-work
thread, never under its lock nor on its event loop), so the files are served only once
:func:`keep_and_clear` has written the marker ``files.kept`` beside ``files/``, last
(:func:`files_kept`); until then the API answers 409 "being kept".

>>> import tempfile, time, os
>>> from pathlib import Path
>>> work = Path(tempfile.mkdtemp()) / "workdir"; work.mkdir()
>>> (work / "train.py").write_text("print(1)")
8
>>> os.utime(work / "train.py", (1, 1)); mark_unpacked(work)
>>> (work / "out").mkdir(); (work / "out" / "predictions.txt").write_text("42")
2
>>> keep_task_files(work, work.parent / "files")
>>> sorted(p.name for p in (work.parent / "files").rglob("*"))
['out', 'predictions.txt']
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

from det_sdk.storage import pause as _yield
from det_sdk.storage import remove_tree

__all__ = ["MAX_KEPT_BYTES", "NOT_KEPT", "files_kept", "keep_and_clear", "keep_task_files",
           "kept_marker", "mark_unpacked", "unpacked_marker"]

log = logging.getLogger("det_sdk.master.task_files")

MAX_KEPT_BYTES = 1 << 30  # 1 GiB of a task's files: larger outputs belong in storage
NOT_KEPT = "NOT_KEPT.txt"
_SKIPPED_DIRS = ("__pycache__",)


def unpacked_marker(workdir: Path) -> Path:
    """The file beside ``workdir`` whose mtime is when it was unpacked (not inside it:
    the task would see it)."""
    return workdir.parent / f"{workdir.name}.unpacked"


def mark_unpacked(workdir: Path) -> None:
    """Record that ``workdir`` was unpacked now: later files are the task's."""
    marker = unpacked_marker(workdir)
    marker.write_text(f"{time.time()}\n")


def _written_by_task(workdir: Path, since: float) -> list[tuple[Path, int]]:
    out = []
    for root, dirs, files in os.walk(workdir):  # links are not followed
        dirs[:] = [d for d in dirs if d not in _SKIPPED_DIRS]
        for name in files:
            path = Path(root) / name
            try:
                st = path.lstat()
            except OSError:
                continue
            if path.is_symlink() or not path.is_file():
                continue
            if st.st_mtime >= since:
                out.append((path, st.st_size))
    return out


def keep_task_files(workdir: Path, dest: Path, limit: int = MAX_KEPT_BYTES) -> str | None:
    """Copy the files the task created or changed in ``workdir`` into ``dest``; a note
    for the task's log when some did not fit in ``limit`` bytes (None otherwise)."""
    marker = unpacked_marker(workdir)
    if not workdir.is_dir() or not marker.is_file():
        return None  # unpacked by a master before this one: nothing tells its files apart
    # a second before the mark: filesystems with coarse timestamps round down
    since = marker.stat().st_mtime - 1.0
    found = sorted(_written_by_task(workdir, since), key=lambda f: (f[1], str(f[0])))
    total, left_out = 0, []
    for path, size in found:
        rel = path.relative_to(workdir)
        if total + size > limit:
            left_out.append((rel, size))
            continue
        target = dest / rel
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
            total += size
            _yield()
        except OSError as err:  # the master's disk: keep the rest, say which
            left_out.append((rel, size))
            log.warning("could not keep %s: %s", path, err)
    if not left_out:
        return None
    lost = sum(size for _, size in left_out)
    note = (f"{len(left_out)} file(s) the task wrote ({lost} bytes) were not kept: the "
            f"master keeps at most {limit} bytes of a task's files (write larger outputs to "
            f"checkpoint storage or another shared path); listed in files/{NOT_KEPT}")
    dest.mkdir(parents=True, exist_ok=True)
    (dest / NOT_KEPT).write_text(note + "\n\n" + "".join(
        f"{rel}\t{size}\n" for rel, size in left_out))
    return note


def kept_marker(dest: Path) -> Path:
    """The file beside ``dest`` (a task's ``files/``) written once its copy is whole."""
    return dest.parent / f"{dest.name}.kept"


def files_kept(workdir: Path, dest: Path) -> bool:
    """Whether the task's kept files (``dest``) are whole: its marker is there, or no
    working directory is left to copy from (a master before the marker kept them under
    its lock, before the task was reported ended; or the task never unpacked one)."""
    return kept_marker(dest).exists() or not workdir.exists()


def keep_and_clear(workdir: Path, dest: Path, limit: int = MAX_KEPT_BYTES) -> str | None:
    """:func:`keep_task_files`, then the marker that says the copy is whole, then the
    working directory goes: after a crash at any point, calling it again completes the
    same result (a copy already marked whole is not made twice). The note as
    :func:`keep_task_files`'s."""
    marker = kept_marker(dest)
    note = None
    if not workdir.exists():
        return None  # kept and cleared already, or never unpacked
    if not marker.exists():
        try:
            note = keep_task_files(workdir, dest, limit)
        except OSError as err:
            note = f"the files it wrote could not be kept: {err}"
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = marker.with_name(marker.name + ".tmp")
        tmp.write_text(note or "kept\n")
        os.replace(tmp, marker)  # last: from now on the files are served
    remove_tree(workdir)
    return note


