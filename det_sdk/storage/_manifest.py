"""A checkpoint's manifest: every file's size and SHA-256, stored last in an object store.

An object store has no rename: a checkpoint's objects appear one by one. The manifest is
what makes it whole: it is written only after every object, a checkpoint without one is
never listed, and every read checks each file against it.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = (d / "w.bin").write_bytes(b"abc")
>>> m = build(d)
>>> m["files"]["w.bin"]["size"]
3
>>> verify_file(m, "w.bin", d / "w.bin", "s3://b/p/u")
>>> _ = (d / "w.bin").write_bytes(b"abd")
>>> verify_file(m, "w.bin", d / "w.bin", "s3://b/p/u")
Traceback (most recent call last):
...
det_sdk.errors.CheckpointCorruptError: checkpoint s3://b/p/u: w.bin does not match ...
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from det_sdk.errors import CheckpointCorruptError

FORMAT = 1
#: Files are read for their digest in pieces of this: hashlib releases the GIL on large
#: buffers (training goes on meanwhile), and the page cache serves them whole.
READ_CHUNK = 4 << 20


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(READ_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def files_of(folder: Path) -> list[str]:
    """The files under ``folder``, as sorted relative POSIX paths (empty folders have no
    object: they are not kept)."""
    return sorted(Path(top, name).relative_to(folder).as_posix()
                  for top, _, names in os.walk(folder) for name in names)


def build(folder: Path) -> dict[str, Any]:
    """The manifest of ``folder``'s files."""
    return {"format": FORMAT, "files": {
        rel: {"size": (folder / rel).stat().st_size, "sha256": sha256_file(folder / rel)}
        for rel in files_of(folder)}}


def encode(manifest: dict[str, Any]) -> bytes:
    return json.dumps(manifest, sort_keys=True).encode()


def decode(data: bytes, where: str) -> dict[str, Any]:
    try:
        manifest = json.loads(data)
    except ValueError as err:
        raise CheckpointCorruptError(f"checkpoint {where}: its manifest is not JSON ({err})"
                                     ) from None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or any(
            not isinstance(v, dict) or "size" not in v or "sha256" not in v
            for v in files.values()):
        raise CheckpointCorruptError(f"checkpoint {where}: its manifest has no valid 'files' "
                                     "(each a size and a sha256)")
    return manifest


def verify_file(manifest: dict[str, Any], rel: str, path: Path, where: str) -> None:
    """Raise :class:`CheckpointCorruptError` unless ``path`` has the size and SHA-256 the
    manifest gives file ``rel``."""
    want = manifest["files"][rel]
    size = path.stat().st_size
    if size != want["size"]:
        raise CheckpointCorruptError(
            f"checkpoint {where}: {rel} has {size} bytes, its manifest says {want['size']} "
            "(truncated or altered in storage)")
    check_digest(manifest, rel, sha256_file(path), where)


def check_digest(manifest: dict[str, Any], rel: str, sha256: str, where: str) -> None:
    """Raise :class:`CheckpointCorruptError` unless ``sha256`` is file ``rel``'s in the
    manifest (a download that took the digest as the file arrived)."""
    if sha256 != manifest["files"][rel]["sha256"]:
        raise CheckpointCorruptError(
            f"checkpoint {where}: {rel} does not match its manifest's SHA-256 (altered or "
            "damaged in storage)")
