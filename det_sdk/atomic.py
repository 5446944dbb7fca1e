"""Whole-file writes that readers never see half done: det_sdk's one atomic-write helper.

:func:`write_atomic` writes to a new temporary file in the target's directory (so the
rename stays on one filesystem), fsyncs it, ``os.replace``-s it over the target and
fsyncs the directory: a reader sees the old contents or the new, never a mix, and after
a crash the file holds one or the other. Nothing else is imported (no TensorFlow): the
master, the CLI, the sessions and the launchers all use it.

>>> import pathlib, tempfile
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = write_atomic(d / "run.json", '{"a": 1}', mode=0o600)
>>> (d / "run.json").read_text(), oct((d / "run.json").stat().st_mode & 0o777)
('{"a": 1}', '0o600')
>>> sorted(p.name for p in d.iterdir())  # no temporary file left
['run.json']
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

__all__ = ["fsync_path", "write_atomic"]


def fsync_path(path: str | os.PathLike[str]) -> None:
    """Flush a file's data, or a directory's entries (a rename into it), to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike[str], data: str | bytes, *, mode: int | None = None,
                 durable: bool = True) -> Path:
    """Replace ``path``'s contents with ``data`` (``str`` is written as UTF-8) atomically.

    ``mode``: the new file's permission bits exactly (``0o600`` for tokens and the
    master's files: owner-only from its creation on, whatever the file had before); None
    leaves them to the umask, as ``open(path, "w")`` would. ``durable``: fsync the file
    before the rename and the directory after it, so that the new contents survive a
    crash of the machine (False where the file only has to outlive the process, e.g. a
    failure record written as a process dies). On any error the temporary file is
    removed and ``path`` is left as it was; the error propagates. Concurrent writers of
    one path each use their own temporary file: the last rename wins, whole.

    Returns ``path`` as a :class:`~pathlib.Path`.
    """
    target = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    tmp = target.with_name(f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(tmp, flags, 0o666 if mode is None else mode)
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)  # exactly ``mode``, whatever the umask
            view = memoryview(payload)
            while view:  # os.write may write less than asked (large files, signals)
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_path(target.parent)
    return target
