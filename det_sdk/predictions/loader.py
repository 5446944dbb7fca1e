"""Reading a streamed predict's output back: :func:`load_predictions`, from a directory
(det_sdk.predictions.files) or from an ``s3://``, ``gs://``, ``az://`` URL
(det_sdk.predictions.buckets), every part verified against the manifest's digests.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from det_sdk.atomic import fsync_path, write_atomic
from det_sdk.predictions.buckets import THREADS, bucket_storage, decode
from det_sdk.predictions.files import read_leaves
from det_sdk.predictions.format import MANIFEST, UNREADABLE, dumps
from det_sdk.predictions.locations import output_url
from det_sdk.predictions.manifest import check_part, complete_manifest

__all__ = ["assemble", "load_from_bucket", "load_predictions"]


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
        leaves = [] if why else read_leaves(data, mmap=True)
    except UNREADABLE as err:
        why, leaves = f"unreadable: {type(err).__name__}: {err}", []
    return check_part(str(data), part, structure, leaves, why)


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
        except UNREADABLE:
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
        write_atomic(sidecar, dumps({"parts": key, "xxh3": h.hexdigest()}))
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return np.load(target, mmap_mode="r")


# --- from a bucket -------------------------------------------------------------------------


def load_from_bucket(url: str, *, mmap: bool = False, storage: Any = None) -> Any:
    """:func:`det_sdk.load_predictions` of an output URL: every part downloaded and
    checked against the manifest's digests (``PredictionsCorruptError`` naming a damaged
    part). ``mmap``: the outputs in temporary ``.npy`` files, mapped then unlinked."""
    client = bucket_storage(url, storage)
    manifest = complete_manifest(lambda: client.get_object(MANIFEST), url,
                                 "a predictions output (context.predict(..., output=URL)")
    structure = manifest["structure"]

    def verified(part: Mapping[str, Any]) -> list[np.ndarray]:
        name, leaves, why = f"{url}/{part['file']}", [], None
        try:
            data = client.get_object(part["file"])
        except FileNotFoundError:
            data, why = b"", "its object is missing"
        if why is None and len(data) != part["bytes"]:
            why = f"{len(data)} bytes, the manifest says {part['bytes']}"
        if why is None:
            try:
                leaves = decode(part["file"], data)
            except UNREADABLE as err:  # a damaged .npy or .npz header
                why = f"unreadable: {type(err).__name__}: {err}"
        return check_part(name, part, structure, leaves, why)

    if not mmap:
        return assemble(manifest, lambda k, shape, dtype: None, _in_order(manifest, verified))
    return _mapped(manifest, verified)


def _in_order(manifest: Mapping[str, Any], verified: Callable[[Mapping[str, Any]], Any]
              ) -> Callable[[Mapping[str, Any]], Any]:
    """``verified`` for each part in the manifest's order, downloading a few ahead."""
    parts = list(manifest["parts"])
    pool = ThreadPoolExecutor(THREADS)
    ahead: dict[int, Any] = {}
    state = {"next": 0}

    def fetch(part: Mapping[str, Any]) -> Any:
        while state["next"] < len(parts) and state["next"] <= part["index"] + THREADS:
            p = parts[state["next"]]
            ahead[p["index"]] = pool.submit(verified, p)
            state["next"] += 1
        result = ahead.pop(part["index"]).result()
        if not ahead and state["next"] >= len(parts):
            pool.shutdown(wait=False)
        return result

    return fetch


def _mapped(manifest: Mapping[str, Any], verified: Callable[[Mapping[str, Any]], Any]) -> Any:
    """Each output in a temporary ``.npy`` (in ``TMPDIR``) filled from the verified parts,
    memory-mapped, then unlinked: the mapping keeps it readable, and nothing is left."""
    structure = manifest["structure"]
    if structure is None:
        return assemble(manifest, lambda k, shape, dtype: None, verified)
    folder = Path(tempfile.mkdtemp(prefix="det-predictions-"))
    try:
        files = []
        for k, leaf in enumerate(structure["leaves"]):
            shape = (manifest["rows"], *leaf["shape"])
            files.append(np.lib.format.open_memmap(folder / f"{k}.npy", mode="w+",
                                                   dtype=np.dtype(leaf["dtype"]), shape=shape))
        fetch = _in_order(manifest, verified)
        for part in manifest["parts"]:
            for out, arr in zip(files, fetch(part)):
                out[part["start"]:part["start"] + part["rows"]] = arr
        for out in files:
            out.flush()
        del files
        maps = [np.load(folder / f"{k}.npy", mmap_mode="r")
                for k in range(len(structure["leaves"]))]
    finally:
        for p in folder.iterdir():
            p.unlink()
        folder.rmdir()
    return assemble(manifest, lambda k, shape, dtype: maps[k], verified)
