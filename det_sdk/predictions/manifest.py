"""The manifest of a streamed predict's output: what the job is, checked before a run
continues it, and once complete the table of parts (which rows each holds) that every
read verifies against.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from det_sdk.predictions.errors import (
    PredictionsCorruptError,
    PredictionsIncompleteError,
    PredictionsMismatchError,
)
from det_sdk.predictions.format import (
    FORMAT,
    MANIFEST,
    digest_leaves,
    is_int,
    part_files,
    structure_ok,
)

__all__ = ["check_part", "check_same_job", "complete_manifest", "final_manifest",
           "manifest_problem"]


def manifest_problem(text: bytes) -> str | None:
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
    if st is not None and not structure_ok(st):
        return "its output structure is not one a model's outputs have"
    parts, rows = m.get("parts"), m.get("rows")
    if not isinstance(parts, list) or not is_int(rows):
        return "it says complete without a table of parts and rows"
    start = 0
    for i, part in enumerate(parts):
        if not (isinstance(part, dict) and part.get("index") == i
                and part.get("file") in part_files(i) and part.get("start") == start
                and is_int(part.get("rows")) and is_int(part.get("bytes"), 1)
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


def complete_manifest(read: Callable[[], bytes], where: Path | str,
                      kind: str) -> dict[str, Any]:
    """The final manifest ``read()`` returns for the output at ``where``, refused when
    absent (not ``kind``), damaged, or not complete (the job stopped before its end)."""
    try:
        text = read()
    except FileNotFoundError:
        raise PredictionsIncompleteError(
            f"load_predictions: {where} has no {MANIFEST}: not {kind} writes one)") from None
    problem = manifest_problem(text)
    if problem:
        raise PredictionsCorruptError(f"load_predictions: {where}/{MANIFEST} is damaged "
                                      f"({problem})")
    manifest: dict[str, Any] = json.loads(text)
    if not manifest.get("complete"):
        raise PredictionsIncompleteError(
            f"load_predictions: the predictions in {where} are not complete: the job stopped "
            "before its end; run it again with the same output= to finish them")
    return manifest


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
        elif digest_leaves(leaves) != part["xxh3"]:
            why = "its bytes do not match the digest stored when it was written"
    if why is not None:
        raise PredictionsCorruptError(
            f"load_predictions: part {part['index']} ({data}) is damaged: {why}; run the "
            "job again with the same output= to write it again")
    return leaves
