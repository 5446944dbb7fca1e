"""What ``init()`` decided about training, once, from the environment and the config.

>>> from det_sdk.config import Length
>>> TrainingPolicy(seed=7, checkpoint_period=Length(epochs=1)).searcher_metric
'val_loss'
"""

from __future__ import annotations

from dataclasses import dataclass

from det_sdk.config import Length

__all__ = ["TrainingPolicy"]


@dataclass(frozen=True)
class TrainingPolicy:
    """How a fit checkpoints, validates and reports; the front's loop follows it."""

    seed: int
    checkpoint_period: Length | None
    validation_period: Length | None = None  # the config's min_validation_period
    report_every: int | None = None  # batches between training-metric reports
    searcher_metric: str = "val_loss"
    max_length: Length | None = None  # the searcher's full length, for progress
