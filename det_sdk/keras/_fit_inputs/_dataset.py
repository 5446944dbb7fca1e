"""A ``tf.data.Dataset`` as training data: handed to Keras as it is (where it was left
is put back into Keras's iterator, ``_pipeline.PipelinePosition``), and padded with
weight-0 batches where the processes' datasets have different numbers of batches.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from det_sdk.distributed import Processes
from det_sdk.errors import UsageError
from det_sdk.keras import _data
from det_sdk.keras._fit_inputs._adapter import DataAdapter
from det_sdk.keras._fit_inputs._pipeline import PipelinePosition
from det_sdk.keras._plan import FitCall

__all__ = ["TFDatasetAdapter"]


@dataclass(frozen=True, eq=False)
class TFDatasetAdapter(DataAdapter):
    """A dataset. ``padding_from``: this process's first padding batch of each pass
    (None: no padding)."""

    padding_from: int | None = None

    @classmethod
    def _agree(cls, dist: Processes, data: dict[str, Any]) -> dict[str, Any]:
        """Give every process's dataset as many batches per pass (a collective).

        Shards rarely split evenly (``shard()`` of 17 batches: 9 and 8). The counts are
        agreed by allgather; a shorter dataset is padded with weight-0 batches (see
        ``_data.pad_dataset``). Infinite datasets need ``steps_per_epoch`` on every
        process.
        """
        x = data["x"]
        if dist.size == 1:
            return {}
        _data.refuse_same_batches(dist, x, "context.fit: x")
        counts = dist.allgather(_data.dataset_batches(x))
        listing = ", ".join(f"rank {r}: {'infinite' if c < 0 else c}"
                            for r, c in enumerate(counts))
        if all(c < 0 for c in counts):
            if not data.get("steps_per_epoch"):
                raise UsageError("context.fit: the training dataset repeats for ever; pass "
                                 "steps_per_epoch (the same on every process)")
            return {}
        if any(c < 0 for c in counts):
            raise UsageError("context.fit: some processes' datasets are infinite and others not "
                             f"({listing}); repeat() every process's dataset or none")
        if len(set(counts)) == 1:
            return {}
        data["x"] = _data.pad_dataset(x, counts[dist.rank], max(counts))
        return {"padding_from": counts[dist.rank] if counts[dist.rank] < max(counts) else None}

    @classmethod
    def _take_class_weight(cls, data: dict[str, Any]) -> Mapping[int, float] | None:
        return None  # Keras applies it to a dataset's batches

    def _own_steps(self) -> int | None:
        n = int(self.x.cardinality())
        return n if n > 0 else None

    def _first_padding(self) -> int | None:
        return self.padding_from

    def sample_input(self) -> Any:
        batch = self.sample_batch()
        return batch[0] if isinstance(batch, (tuple, list)) else batch

    def sample_batch(self) -> Any:
        return next(iter(self.x.take(1)))

    def pipeline_position(self) -> PipelinePosition | None:
        return PipelinePosition(self.x, steps_given=bool(self.data.get("steps_per_epoch")),
                                name=repr(self.x))

    def call_inputs(self, call: FitCall, seed: int) -> dict[str, Any]:
        """The dataset as it is (its position is the pipeline's, put back into Keras's
        iterator); a call that starts mid-epoch runs the rest of that epoch."""
        if not call.start_batch:
            return {}
        steps = self.data.get("steps_per_epoch") or int(self.x.cardinality())
        if steps < 0:
            raise UsageError("context.fit: cannot resume a tf.data.Dataset of unknown length "
                             "in mid-epoch; pass steps_per_epoch")
        return {"steps_per_epoch": steps - call.start_batch}

    def steps_of_call(self, call_data: Mapping[str, Any]) -> int | None:
        # After _agree every process has as many batches: a dataset of unknown length
        # counts as equal here (-2 everywhere); different known lengths cannot occur.
        steps = call_data.get("steps_per_epoch")
        return int(call_data["x"].cardinality()) if steps is None else steps
