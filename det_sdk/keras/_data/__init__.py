"""Data for training: sharding per process, and epoch-addressable input pipelines.

``wrap_data`` dispatches on the kind of data and returns the same kind:

* numpy arrays (alone, or lists/dicts of them for multi-input models) become
  :class:`ShardedArray` views of this process's contiguous part, which remember
  where they came from. ``fit`` uses that memory to draw one seeded permutation of
  the *whole* data set per epoch and give each process its part of every batch;
  ``predict`` uses it to put gathered rows back in their original order.
* a ``keras.utils.Sequence`` is returned as is on one process.
* a ``tf.data.Dataset`` is returned as is on one process.

The pipelines ``fit`` builds are addressable by (epoch, batch): a run resumed from
a checkpoint starts exactly where it stopped, in the same data order.
"""

# In layers (pyproject.toml's import-linter contract): _wrap, the entry points, over
# _sequence | _datasets, over _pipeline | _agree, over _arrays (the numpy side); none of
# them imports this package's __init__, which only re-exports.
from det_sdk.keras._data._agree import same_everywhere
from det_sdk.keras._data._arrays import (
    ShardedArray,
    as_per_process,
    check_not_cut,
    full_data,
    is_array_data,
    is_per_process,
    is_wrapped,
    num_rows,
    slice_rows,
    tensors_as_arrays,
)
from det_sdk.keras._data._datasets import (
    dataset_batch_size,
    dataset_batches,
    dataset_sharded_for,
    pad_dataset,
    refuse_same_batches,
)
from det_sdk.keras._data._pipeline import array_pipeline, class_weights
from det_sdk.keras._data._sequence import ShardedSequence, sequence_pipeline, sequence_steps
from det_sdk.keras._data._wrap import full_rows, local_part, wrap_data

__all__ = [
    "ShardedArray",
    "ShardedSequence",
    "array_pipeline",
    "as_per_process",
    "check_not_cut",
    "class_weights",
    "dataset_batch_size",
    "dataset_batches",
    "dataset_sharded_for",
    "full_data",
    "full_rows",
    "is_array_data",
    "is_per_process",
    "is_wrapped",
    "local_part",
    "num_rows",
    "pad_dataset",
    "refuse_same_batches",
    "same_everywhere",
    "sequence_pipeline",
    "sequence_steps",
    "slice_rows",
    "tensors_as_arrays",
    "wrap_data",
]
