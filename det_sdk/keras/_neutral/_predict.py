"""``context.predict(model, x, output=DIR)`` on JAX and PyTorch: predictions streamed to
part files (docs/batch-inference.md), the TensorFlow engine's layout and store
(``det_sdk.predictions``), so ``det_sdk.load_predictions(DIR)`` reads either.

The input's global batches are numbered in its order: numpy arrays (or a list, tuple or
dict of them) cut into ``batch_size`` rows, or a ``keras.utils.PyDataset``'s batches
(``ds[b]``; its ``x`` where a batch is ``(x, y)`` or ``(x, y, w)``). Process ``r`` of
``N`` predicts the batches ``b % N == r`` with a model of its own (the same weights) and
a writer thread writes each as the part named ``b``. A rerun into the same ``DIR`` skips
the complete parts. Unlike the TensorFlow engine's, the loop takes no stop from the
master between batches: ``det job pause`` stops it with the process, and the rerun
resumes from the parts written.

>>> sorted(ACCEPTED)
['batch_size', 'verbose']
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import xxhash

from det_sdk.core._context import Context
from det_sdk.distributed import Processes
from det_sdk.errors import ArgumentTypeError, UsageError
from det_sdk.keras._neutral._backend import Backend
from det_sdk.predictions import (
    PartWriter,
    StreamedPredictions,
    digest_arrays,
    gather_failures,
    open_store,
    output_store,
)

__all__ = ["ACCEPTED", "predict_to"]

log = logging.getLogger("det_sdk.keras")

ACCEPTED = {"batch_size", "verbose"}


def _leaves(struct: Any) -> list[np.ndarray]:
    return [np.asarray(a) for a in keras.tree.flatten(struct)]


def _x_of(batch: Any) -> Any:
    if isinstance(batch, (tuple, list)) and len(batch) in (1, 2, 3):
        return batch[0]
    return batch


def _plan(x: Any, batch_size: int, dist: Processes
          ) -> tuple[dict[str, Any], int, Callable[[int], Any]]:
    """The input's fingerprint, its number of global batches, global batch -> inputs."""
    if isinstance(x, keras.utils.PyDataset):
        total = len(x)
        digest = digest_arrays(_leaves(_x_of(x[0]))) if dist.is_chief and total else None
        return ({"kind": "sequence", "batches": total, "digest": digest}, total,
                lambda b: _x_of(x[b]))
    try:
        leaves = _leaves(x)
    except (TypeError, ValueError):
        leaves = []
    if not leaves or any(a.dtype == object or a.ndim == 0 for a in leaves):
        raise ArgumentTypeError(
            "context.predict: with output=, x must be numpy arrays (or a list, tuple or dict "
            f"of them) or a keras.utils.PyDataset on JAX and PyTorch; got {type(x).__name__}")
    rows = {len(a) for a in leaves}
    if len(rows) != 1:
        raise ArgumentTypeError(f"context.predict: x's arrays have different numbers of rows "
                                f"({sorted(rows)})")
    n = rows.pop()
    fp = {"kind": "arrays", "rows": n, "batch_size": batch_size,
          "digest": digest_arrays(leaves) if dist.is_chief else None}
    return fp, math.ceil(n / batch_size), lambda b: keras.tree.map_structure(
        lambda a: np.asarray(a)[b * batch_size:(b + 1) * batch_size], x)


def _model_fingerprint(model: Any) -> dict[str, Any]:
    """The model's class and a digest of its weights' values, as the TensorFlow engine's."""
    h = xxhash.xxh3_64()
    for v in model.weights:
        a = np.ascontiguousarray(np.asarray(keras.ops.convert_to_numpy(v.value)))
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.view(np.uint8).reshape(-1).data)
    return {"class": type(model).__name__, "weights": h.hexdigest()}


def predict_to(core: Context, backend: Backend, model: Any, x: Any,
               output: str | os.PathLike[str], **kwargs: Any) -> StreamedPredictions:
    """Stream ``model``'s predictions for ``x`` into ``output`` (see the module)."""
    unknown = set(kwargs) - ACCEPTED
    if unknown:
        raise UsageError(f"context.predict: with output=, only {sorted(ACCEPTED)} are "
                         f"accepted besides model and x; got {sorted(unknown)}")
    batch_size = kwargs.get("batch_size") or 32
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ArgumentTypeError(f"context.predict: batch_size must be a positive int, got "
                                f"{batch_size!r}")
    dist = core.distributed
    fingerprint, total, fetch = _plan(x, batch_size, dist)
    store = open_store(dist, output_store(core, output), fingerprint, _model_fingerprint(model))
    mine = list(range(dist.rank, total, dist.size))
    done = store.complete_parts(mine)
    writer = PartWriter(store)
    count, failure = 0, None
    try:
        with backend.local_model(model, dist) as local:
            for b in mine:
                if b in done:
                    continue
                outputs = local.predict_on_batch(fetch(b))
                writer.put(b, keras.tree.map_structure(
                    lambda t: np.asarray(keras.ops.convert_to_numpy(t)), outputs))
                count += 1
    except BaseException as err:
        failure = err
    try:
        writer.close()
    except BaseException as err:
        failure = failure or err
    # every process ends here, failed or not, so that none waits on a dead one
    results = gather_failures(dist, store, failure, len(mine), len(done))
    resumed = sum(r[2] for r in results)
    rows = None
    if dist.is_chief:
        rows = store.finish(total)["rows"]
        if kwargs.get("verbose", "auto"):
            log.info("det_sdk: predictions: %s rows in %s parts in %s (%s written by this "
                     "process, %s kept from an earlier run)", rows, total, store.location,
                     count, resumed)
        core.train.report_rows(rows, rows, str(store.location))
    rows = dist.broadcast(rows)
    assert rows is not None  # the chief's count, on every process
    return StreamedPredictions(path=store.location, rows=rows, parts=total, resumed=resumed)
