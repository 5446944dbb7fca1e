"""Training data det_sdk does not batch itself (a Python generator or iterator, or
anything else Keras takes): handed to ``model.fit`` as given; and no data at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from det_sdk.errors import UsageError
from det_sdk.keras._fit_inputs._adapter import DataAdapter
from det_sdk.keras._fit_inputs._pipeline import PipelinePosition, UnsavedPipeline
from det_sdk.keras._plan import FitCall

__all__ = ["GeneratorAdapter", "NoData"]


@dataclass(frozen=True, eq=False)
class GeneratorAdapter(DataAdapter):
    """A generator or iterator: Keras reads it; its length is ``steps_per_epoch``'s."""

    @classmethod
    def _take_class_weight(cls, data: dict[str, Any]) -> Mapping[int, float] | None:
        # Left for Keras, which does what model.fit does with it: Keras 2 weights the
        # generator's batches, Keras 3 refuses it naming class_weight (never dropped)
        return None

    def pipeline_position(self) -> PipelinePosition | None:
        return UnsavedPipeline(type(self.x).__name__)


@dataclass(frozen=True, eq=False)
class NoData(GeneratorAdapter):
    """No ``x``: refused when the first ``model.fit`` call would need it."""

    def pipeline_position(self) -> PipelinePosition | None:
        return None

    def call_inputs(self, call: FitCall, seed: int) -> dict[str, Any]:
        raise UsageError("context.fit: x (the training data) is required")
