"""Streamed predictions: ordered part files, a manifest, exactly once across reruns.

``context.predict(model, data, output=DIR)`` (det_sdk.keras, and det_sdk.pytorch's script
context) writes its predictions here batch by batch instead of holding them in memory.
This package is the framework-neutral half (no TensorFlow, no torch), in layers, each
module importing only those below it (pyproject.toml's import-linter contract):

- ``streaming``: what the fronts' predict loops share (the store ``output=`` names,
  opening it for every process, the writer thread, stopping, gathering the outcomes);
  ``loader``: :func:`load_predictions`;
- ``files``: the directory store :class:`PartStore` (with its lock file);
  ``buckets``: the object-store one, ``BucketPartStore`` (with its lock object);
- ``store``: :class:`OutputStore`, the interface both stores implement;
- ``manifest``: the manifest's checks (the same job, complete, each part's entry);
- ``format``: the layout, a part's format and sidecar, the digests; ``locations``:
  where ``output=`` is;
- ``errors``: what they raise.

``output=`` may also be an ``s3://``, ``gs://`` or ``az://`` URL: the same layout as
objects (:func:`output_store` picks the store once; the predict loops call the same
methods on either).

Layout of an output directory::

    manifest.json            what the job is (input fingerprint, model, output structure);
                             "complete": true plus every part's rows once finished
    part-000000000.npy       global batch 0's predictions (one output: .npy; several: .npz)
    part-000000000.json      its sidecar: rows, bytes, an xxh3 digest of its values
    ...

A part is named by its *global batch index*: the input's batches are numbered in the
input's order and dealt out to the processes, so concatenating the parts by index gives
the predictions in the input's order, however many processes wrote them. A part is
written to a temporary name and renamed, then its sidecar likewise: a part with a
sidecar that verifies is complete; anything else (a temporary file, a part without its
sidecar, a part whose bytes do not match) is written again. Progress is therefore the
set of complete parts: a rerun with the same ``DIR`` skips them and writes the others,
so every row is in the output exactly once, whenever the previous run was killed.
Durability: det_sdk.predictions.files.

>>> import numpy as np, tempfile
>>> d = tempfile.mkdtemp()
>>> store = PartStore(d)
>>> store.begin({"kind": "arrays", "rows": 5, "digest": "x"}, {"model": "m"})
>>> for i, rows in enumerate([np.arange(3.0), np.arange(3.0, 5.0)]):
...     _ = store.write_part(i, rows)
>>> store.finish(parts=2)["rows"]
5
>>> load_predictions(d)
array([0., 1., 2., 3., 4.])
"""

from det_sdk.predictions.errors import (
    PredictionsBusyError,
    PredictionsCorruptError,
    PredictionsDiskFullError,
    PredictionsIncompleteError,
    PredictionsMismatchError,
)
from det_sdk.predictions.files import PartStore
from det_sdk.predictions.format import (
    FORMAT,
    LOCK,
    MANIFEST,
    digest_arrays,
    flatten_outputs,
    part_stem,
    same_structure,
)
from det_sdk.predictions.loader import assemble, load_predictions
from det_sdk.predictions.locations import output_url, resolve_output
from det_sdk.predictions.manifest import (
    check_part,
    check_same_job,
    complete_manifest,
    final_manifest,
)
from det_sdk.predictions.store import OutputStore
from det_sdk.predictions.streaming import (
    PartWriter,
    StopAsked,
    StreamedPredictions,
    gather_failures,
    open_store,
    output_store,
)

__all__ = ["FORMAT", "LOCK", "MANIFEST", "OutputStore", "PartStore", "PartWriter",
           "PredictionsBusyError", "PredictionsCorruptError", "PredictionsDiskFullError",
           "PredictionsIncompleteError", "PredictionsMismatchError", "StopAsked",
           "StreamedPredictions", "assemble", "check_part", "check_same_job",
           "complete_manifest", "digest_arrays", "final_manifest", "flatten_outputs",
           "gather_failures", "load_predictions", "open_store", "output_store", "output_url",
           "part_stem", "resolve_output", "same_structure"]
