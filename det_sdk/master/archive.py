"""Model directories travel as .tar.gz; the master checks every member before unpacking.

Refused, with the member named: absolute paths, ``..`` components, links that lead
outside the directory, device files and fifos, and archives over the size limits.
Nothing is written unless the whole archive passes.

>>> import io, tarfile
>>> buf = io.BytesIO()
>>> with tarfile.open(fileobj=buf, mode="w:gz") as tar:
...     info = tarfile.TarInfo("../evil"); tar.addfile(info, io.BytesIO(b""))
>>> check_archive(buf.getvalue())
Traceback (most recent call last):
...
det_sdk.master.archive.ArchiveError: archive member '../evil' leaves the directory
"""

from __future__ import annotations

import io
import os
import posixpath
import tarfile
import tempfile
from pathlib import Path
from typing import IO, Any

from det_sdk.errors import DetSdkError

__all__ = [
    "MAX_ARCHIVE_BYTES",
    "MAX_UNPACKED_BYTES",
    "ArchiveError",
    "ArchiveTooLargeError",
    "check_archive",
    "decode_archive",
    "pack",
    "unpack",
]

MAX_ARCHIVE_BYTES = 64 * 1024 * 1024  # compressed, as uploaded
MAX_UNPACKED_BYTES = 512 * 1024 * 1024
MAX_NAME_CHARS = 1024  # a member's path (Linux: 4096 bytes, 255 per component)
MAX_DEPTH = 64  # directory levels of a member's path


class ArchiveError(DetSdkError, ValueError):
    """An uploaded model directory that the master refuses."""


class ArchiveTooLargeError(ArchiveError):
    """A directory whose archive would pass a size limit: packing stopped there."""

    def __init__(self, message: str, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


def _escapes(name: str) -> bool:
    norm = posixpath.normpath(name)
    return norm == ".." or norm.startswith("../") or posixpath.isabs(name)


def decode_archive(text: str, field: str, prefix_errors: bool = True) -> bytes:
    """The .tar.gz a request carries as base64 in ``field``, checked; an
    :class:`~det_sdk.master.errors.InvalidRequest` naming ``field`` otherwise (the
    archive's own error after ``field: `` where ``prefix_errors``).

    >>> decode_archive("%%", "files")
    Traceback (most recent call last):
    ...
    det_sdk.master.errors.InvalidRequest: files is not valid base64
    """
    import base64
    import binascii

    from det_sdk.master.errors import InvalidRequest

    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"{field} is not valid base64") from None
    try:
        check_archive(data)
    except ValueError as err:
        raise InvalidRequest(f"{field}: {err}" if prefix_errors else str(err)) from None
    return data


def check_archive(data: bytes, max_bytes: int = MAX_ARCHIVE_BYTES,
                  max_unpacked: int = MAX_UNPACKED_BYTES) -> list[tarfile.TarInfo]:
    """The members of a .tar.gz, each checked; raises :class:`ArchiveError`."""
    if len(data) > max_bytes:
        raise ArchiveError(
            f"model directory archive is {len(data)} bytes, over the limit of {max_bytes}"
        )
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            members = tar.getmembers()
    except (tarfile.TarError, OSError, EOFError) as err:
        raise ArchiveError(f"model directory is not a readable .tar.gz: {err}") from None
    total = 0
    files: set[str] = set()
    for m in members:
        if len(m.name) > MAX_NAME_CHARS or any(
                len(part.encode()) > 255 for part in m.name.split("/")):
            raise ArchiveError(f"archive member {m.name[:80]!r}... has a name over "
                               f"{MAX_NAME_CHARS} characters (or a part over 255 bytes)")
        if m.name.count("/") >= MAX_DEPTH:
            raise ArchiveError(f"archive member {m.name[:80]!r}... is nested over {MAX_DEPTH} "
                               f"levels deep")
        if posixpath.isabs(m.name) or m.name.startswith("/"):
            raise ArchiveError(f"archive member {m.name!r} has an absolute path")
        if _escapes(m.name):
            raise ArchiveError(f"archive member {m.name!r} leaves the directory")
        if m.issym() or m.islnk():
            target = m.linkname
            if m.issym():
                target = posixpath.join(posixpath.dirname(m.name), target)
            if posixpath.isabs(m.linkname) or _escapes(target):
                raise ArchiveError(
                    f"archive member {m.name!r} links outside the directory ({m.linkname!r})"
                )
            # Links are resolved one after another when unpacked: `s -> .` then
            # `t -> s/..` leaves the directory although neither does alone. A link
            # target is therefore a plain relative path (no `.` or `..` parts), and a
            # hard link names a regular file that comes earlier in the archive.
            if m.issym() and any(part in (".", "..", "") for part in m.linkname.split("/")):
                raise ArchiveError(f"archive member {m.name!r} links to {m.linkname!r}: a "
                                   f"link target may not contain '.' or '..' parts")
            if m.islnk() and posixpath.normpath(m.linkname) not in files:
                raise ArchiveError(f"archive member {m.name!r} is a hard link to "
                                   f"{m.linkname!r}, which is not an earlier regular file")
        elif not (m.isfile() or m.isdir()):
            raise ArchiveError(f"archive member {m.name!r} is not a file or directory")
        if m.isfile():
            files.add(posixpath.normpath(m.name))
        total += max(m.size, 0)
        if total > max_unpacked:
            raise ArchiveError(f"model directory unpacks to over {max_unpacked} bytes")
    return members


def unpack(data: bytes, dest: Path) -> None:
    """Check, then unpack ``data`` into the new directory ``dest``."""
    check_archive(data)
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        # The "data" filter re-checks what check_archive did (Python >= 3.11.4).
        kwargs: dict[str, Any] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(dest, **kwargs)  # members checked above
    os.chmod(dest, 0o755)


class _Bounded(io.RawIOBase):
    """A write-only file that passes bytes on to ``out`` until ``limit`` is passed."""

    def __init__(self, out: IO[bytes], limit: int) -> None:
        self.out, self.limit, self.written = out, limit, 0

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self.written += len(b)
        if self.written > self.limit:
            raise ArchiveTooLargeError(f"packs to over {self.limit} bytes", self.limit)
        return self.out.write(b)


def pack(directory: Path, max_bytes: int = MAX_ARCHIVE_BYTES,
         max_unpacked: int = MAX_UNPACKED_BYTES) -> bytes:
    """A .tar.gz of ``directory``'s contents (paths relative to it; ``.git``,
    ``__pycache__``, ``.venv`` and ``det-runs`` left out).

    Written to a temporary file, not memory, and stopped with
    :class:`ArchiveTooLargeError` as soon as the archive passes ``max_bytes`` or its
    files ``max_unpacked`` (the master's limits; a file's size is checked before it is
    read): a directory of a GB costs neither a GB of memory nor the time to compress it.
    """
    with tempfile.TemporaryFile() as spool:
        bounded = _Bounded(spool, max_bytes)
        total = 0
        with tarfile.open(fileobj=bounded, mode="w:gz") as tar:
            for path in sorted(directory.rglob("*")):
                rel = path.relative_to(directory)
                if any(part in (".git", "__pycache__", ".venv", "det-runs")
                       for part in rel.parts):
                    continue
                if path.is_file() and not path.is_symlink():
                    total += path.stat().st_size
                    if total > max_unpacked:
                        raise ArchiveTooLargeError(
                            f"holds over {max_unpacked} bytes of files (at {rel})", max_unpacked)
                tar.add(path, arcname=str(rel), recursive=False)
        spool.seek(0)
        return spool.read()
