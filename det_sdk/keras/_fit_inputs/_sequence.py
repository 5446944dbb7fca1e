"""A ``keras.utils.Sequence`` (Keras 3: ``PyDataset``) as training data, whole or
``wrap_data``'s :class:`_data.ShardedSequence` (one process's block of batches).

det_sdk feeds it through its own pipeline (``_data.sequence_pipeline``), addressed by
(epoch, batch) on both Keras majors; Keras then no longer calls ``on_epoch_end``,
which :attr:`KerasSequenceAdapter.sequence` names for ``SequenceEpochEnd`` to call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from det_sdk.keras import _data
from det_sdk.keras._fit_inputs._adapter import DataAdapter
from det_sdk.keras._plan import FitCall

__all__ = ["KerasSequenceAdapter"]


@dataclass(frozen=True, eq=False)
class KerasSequenceAdapter(DataAdapter):
    """A Sequence: every process runs ``ceil(batches / processes)`` steps."""

    def _own_steps(self) -> int | None:
        return _data.sequence_steps(self.x)

    def _first_padding(self) -> int | None:
        x = self.x
        if isinstance(x, _data.ShardedSequence):  # the batches dealt out in turn
            n, steps = len(x.full), math.ceil(len(x.full) / x.size)
            mine = math.ceil((n - x.rank) / x.size)
            return mine if mine < steps else None
        return None

    def sample_input(self) -> Any:
        batch = self.x[0]
        return batch[0] if isinstance(batch, (tuple, list)) else batch

    def sample_batch(self) -> Any:
        return self.x[0]

    @property
    def sequence(self) -> Any:
        return self.x

    def call_inputs(self, call: FitCall, seed: int) -> dict[str, Any]:
        """A ``tf.data`` pipeline of the Sequence's batches, in an order drawn from
        ``seed`` and the epoch alone."""
        ds, steps = _data.sequence_pipeline(
            self.x, seed=seed, shuffle=bool(self.data.get("shuffle", True)),
            start_epoch=call.initial_epoch, start_batch=call.start_batch, end_epoch=call.epochs,
            class_weight=self.class_weight,
        )
        return {"x": ds, "steps_per_epoch": steps - call.start_batch, "shuffle": False}
