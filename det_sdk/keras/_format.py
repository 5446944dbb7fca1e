"""The checkpoint format's files, read and written without a framework.

A checkpoint directory (see :mod:`det_sdk.keras._checkpoint` for what each holds)::

    model.json  state.json  state.bin  metadata.json  checksums.json

Both Keras engines write it: TensorFlow's (``_checkpoint``) and the one for JAX and
PyTorch (``_neutral``). Arrays are named by group and position, their dtypes by numpy's
names (``float32``, ``bfloat16``), so that a checkpoint one backend trains loads under
another. Nothing here imports TensorFlow, JAX or torch.

>>> import tempfile
>>> d = Path(tempfile.mkdtemp())
>>> n = write_files(d, [("model", "w", np.arange(3.0))], b"{}", {"format_version": 2})
>>> read_arrays(d)["model"][0].tolist()
[0.0, 1.0, 2.0]
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import xxhash

from det_sdk.arrayfile import ArrayFileWriter, read_exactly
from det_sdk.errors import CheckpointCorruptError
from det_sdk.storage import OWNER_FILE

__all__ = ["ALIGN", "CHECKSUMS", "FILES", "FORMAT_VERSION", "READABLE_VERSIONS", "dtype_name",
           "json_bytes", "must_verify", "numpy_dtype", "read_arrays", "read_group",
           "read_json", "verify_file", "write_bytes", "write_files", "write_json"]

# 2: checksums.json (xxh3-64 of every file), keras_major. 1: no checksums (still read).
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
CHECKSUMS = "checksums.json"
ALIGN = 64  # bytes: TensorFlow's buffer alignment, kept by every array in state.bin
FILES = ("metadata.json", "model.json", "state.json", "state.bin")


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype a checkpoint names (``bfloat16`` through ml_dtypes).

    >>> numpy_dtype("float32"), numpy_dtype("bfloat16").name
    (dtype('float32'), 'bfloat16')
    """
    try:
        return np.dtype(name)
    except TypeError:
        found = getattr(ml_dtypes, name, None)
        if found is None:
            raise CheckpointCorruptError(f"checkpoint: unknown dtype {name!r}") from None
        return np.dtype(found)


def dtype_name(dtype: np.dtype) -> str:
    """The name a checkpoint gives a numpy dtype (TensorFlow's names are numpy's).

    >>> dtype_name(np.dtype("int64"))
    'int64'
    """
    return np.dtype(dtype).name


def write_files(path: Path, arrays: Sequence[tuple[str, str, np.ndarray]], model_json: bytes,
                metadata: Mapping[str, Any]) -> int:
    """Write a checkpoint into the directory ``path``: ``arrays`` (group, name, host
    array) into ``state.bin`` and its index, ``model_json``, ``metadata``, and every
    file's xxh3-64 checksum (about 30 GB/s: nothing next to the disk) in
    ``checksums.json``. Bytes written."""
    index = []
    with ArrayFileWriter(path / "state.bin", align=ALIGN) as out:
        for group, name, arr in arrays:
            offset = out.add(arr)
            index.append({"group": group, "name": name, "dtype": dtype_name(arr.dtype),
                          "shape": list(arr.shape), "offset": offset, "nbytes": arr.nbytes})
    sums = {"state.bin": out.digest.hexdigest()}
    sums["state.json"] = write_json(path / "state.json",
                                    {"arrays": index, "total_bytes": out.total})
    sums["model.json"] = write_bytes(path / "model.json", model_json)
    sums["metadata.json"] = write_json(path / "metadata.json", metadata)
    write_json(path / CHECKSUMS, {"algorithm": "xxh3_64", "files": sums})
    return sum((path / name).stat().st_size for name in (*FILES, CHECKSUMS))


def write_json(path: Path, obj: Any) -> str:
    """Write ``obj`` as JSON; its xxh3-64 checksum."""
    return write_bytes(path, json_bytes(obj))


def json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, default=_json_default).encode()


def write_bytes(path: Path, data: bytes) -> str:
    """Write ``data`` as the file ``path``; its xxh3-64 checksum."""
    path.write_bytes(data)
    return xxhash.xxh3_64_hexdigest(data)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return str(obj)



def _checksums(path: Path) -> dict[str, str]:
    sums = read_json(path / CHECKSUMS) if (path / CHECKSUMS).is_file() else None
    if not isinstance(sums, dict) or not isinstance(sums.get("files"), dict):
        raise CheckpointCorruptError(f"checkpoint {path}: {CHECKSUMS} is missing or unreadable")
    return sums["files"]


def verify_file(path: Path, name: str, data: Any) -> None:
    """Raise unless ``data`` (the bytes of file ``name``) has its recorded checksum."""
    expected = _checksums(path).get(name)
    if expected != xxhash.xxh3_64_hexdigest(data):
        raise CheckpointCorruptError(
            f"checkpoint {path}: {name} does not match its checksum (altered or damaged "
            "on disk); use another checkpoint")


def read_json(path: Path, verify: bool = False) -> Any:
    try:
        data = path.read_bytes()
        if verify:
            verify_file(path.parent, path.name, data)
        return json.loads(data)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointCorruptError(f"checkpoint file {path} is unreadable: {err}") from None


def read_arrays(path: Path, verify: bool = True) -> dict[str, list[np.ndarray]]:
    verify = verify and must_verify(path)
    index = read_json(path / "state.json", verify=verify)
    try:
        entries = index["arrays"]
        total = int(index["total_bytes"])
    except (KeyError, TypeError, ValueError):
        raise CheckpointCorruptError(f"checkpoint {path}: state.json has no array index") from None
    size = os.path.getsize(path / "state.bin")
    if size != total:
        raise CheckpointCorruptError(
            f"checkpoint {path}: state.bin holds {size} bytes, its index says {total} "
            "(truncated or overwritten)"
        )
    # Reads into uninitialised memory (a bytearray would be zero-filled first); the
    # arrays are views of it, handed to TensorFlow without copies (see _assign).
    raw = np.empty(total + ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGN
    buf = raw[start:start + total]
    try:
        fd = os.open(path / "state.bin", os.O_RDONLY)
    except OSError as err:
        raise CheckpointCorruptError(f"checkpoint file {path / 'state.bin'} is unreadable: "
                                     f"{err}") from None
    try:  # a loop: one read stops at 2 GiB - 4 KiB on Linux
        read_exactly(fd, buf, offset=0, what=f"checkpoint file {path / 'state.bin'}")
    finally:
        os.close(fd)
    if verify:
        verify_file(path, "state.bin", buf)
    groups: dict[str, list[np.ndarray]] = {}
    for e in entries:
        dtype = numpy_dtype(e["dtype"])
        start, nbytes = int(e["offset"]), int(e["nbytes"])
        arr = buf[start:start + nbytes].view(dtype).reshape(e["shape"])
        groups.setdefault(e["group"], []).append(arr)
    return groups


def read_group(path: Path, group: str) -> list[np.ndarray]:
    """The arrays of one ``group`` of checkpoint ``path``'s state file, read alone (a
    training pipeline's state, next to a model's weights the restore read already).

    Checked against ``state.json``'s index (its own checksum); the restore that comes
    first verified ``state.bin``.
    """
    index = read_json(path / "state.json", verify=must_verify(path))
    try:
        entries = [e for e in index["arrays"] if e["group"] == group]
    except (KeyError, TypeError):
        raise CheckpointCorruptError(f"checkpoint {path}: state.json has no array index") from None
    out = []
    with open(path / "state.bin", "rb") as f:
        for e in entries:
            f.seek(int(e["offset"]))
            data = f.read(int(e["nbytes"]))
            if len(data) != int(e["nbytes"]):
                raise CheckpointCorruptError(f"checkpoint {path}: state.bin is truncated")
            dtype = numpy_dtype(e["dtype"])
            out.append(np.frombuffer(data, dtype).reshape(e["shape"]))
    return out



def must_verify(path: Path, meta: Any = None) -> bool:
    """Whether checkpoint ``path``'s files are checked against ``checksums.json``.

    Always, but for a genuine format-1 checkpoint: it has neither ``checksums.json`` nor
    ``keras_major`` (both came with format 2), nor a master's owner file (which came
    after format 2: a checkpoint a master's task saved is format 2 or later). What the
    metadata claims cannot switch the check off: a directory with ``checksums.json`` or
    an owner file is verified whatever its ``format_version`` says, and a format-2 one
    (or one naming its Keras major, which only the format-2 writer does) without it is
    incomplete: damaged, which the master marks (never retried as "another Keras").
    """
    if (path / CHECKSUMS).exists() or (path / OWNER_FILE).exists():
        return True
    if meta is None:
        meta = read_json(path / "metadata.json")
    if not isinstance(meta, dict):
        return True
    return meta.get("format_version", 1) != 1 or "keras_major" in meta
