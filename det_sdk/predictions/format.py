"""The layout of a streamed predict's output: the names of its files, a part's format
(one output: ``.npy``; several: an uncompressed ``.npz``), its sidecar, the digests.

What a directory and a bucket hold alike (det_sdk.predictions.files, .buckets): the
stores write and read through these; none of this module touches a disk.
"""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np
import xxhash

from det_sdk.predictions.errors import PredictionsCorruptError

__all__ = ["FORMAT", "LOCK", "MANIFEST", "PART_FILE", "UNREADABLE", "digest_arrays",
           "digest_leaves", "dumps", "encode_leaves", "flatten_outputs", "is_int",
           "part_files", "part_stem", "same_structure", "sidecar_ok", "structure_ok"]

FORMAT = 1
MANIFEST = "manifest.json"
LOCK = ".predict.lock"  # held (flock) by the chief of the run writing the directory
PART_FILE = re.compile(r"^part-(\d{9})\.(npy|npz|json)$")
_KINDS = ("array", "list", "tuple", "dict")


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


def digest_leaves(leaves: Iterable[np.ndarray]) -> str:
    """The xxh3 digest of a part's values, stored in its sidecar and the manifest."""
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


# --- control files are data: validated before use ---------------------------------------

# what reading a damaged part may raise: a bad header (ValueError), a cut zip
# (BadZipFile), a file gone (OSError), a missing member (KeyError), a short read (EOFError)
UNREADABLE: tuple[type[BaseException], ...] = (OSError, ValueError, KeyError, EOFError,
                                               zipfile.BadZipFile)


def is_int(v: Any, least: int = 0) -> bool:
    """Whether a control file's field ``v`` is an int (not a bool) of at least ``least``."""
    return isinstance(v, int) and not isinstance(v, bool) and v >= least


def structure_ok(st: Any) -> bool:
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
                and all(is_int(d) for d in leaf["shape"])):
            return False
        try:
            if np.dtype(leaf["dtype"]).hasobject:
                return False
        except TypeError:
            return False
    return True


def part_files(index: int) -> tuple[str, str]:
    """The names part ``index``'s file may have (one output, several)."""
    stem = part_stem(index)
    return f"{stem}.npy", f"{stem}.npz"


def sidecar_ok(meta: Any, index: int) -> bool:
    """Whether a part's sidecar is whole: its own index, its own file's name (``.npy``
    for one output, ``.npz`` for several), counts and a digest."""
    return (isinstance(meta, dict) and meta.get("index") == index
            and meta.get("file") in part_files(index)
            and is_int(meta.get("rows")) and is_int(meta.get("bytes"), 1)
            and isinstance(meta.get("xxh3"), str) and structure_ok(meta.get("structure"))
            and meta["file"].endswith(".npy") == (meta["structure"]["kind"] == "array"))


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


def _describe(structure: Mapping[str, Any]) -> str:
    return ", ".join(f"{leaf['name']}: {np.dtype(leaf['dtype']).name}{tuple(leaf['shape'])}"
                     for leaf in structure["leaves"])


def dumps(obj: Any) -> str:
    """A manifest's or sidecar's text (sorted keys: the same object, the same bytes)."""
    return json.dumps(obj, indent=1, sort_keys=True)


def encode_leaves(f: IO[bytes], structure: Mapping[str, Any], leaves: list[np.ndarray]) -> None:
    """Write a part's arrays to ``f``: one output as ``.npy``, several as ``.npz``."""
    if structure["kind"] == "array":
        np.lib.format.write_array(f, leaves[0], allow_pickle=False)
    else:  # uncompressed: np.savez's members are .npy files, read back in place
        names = [leaf["name"] for leaf in structure["leaves"]]
        np.savez(f, **dict(zip(names, leaves)))
