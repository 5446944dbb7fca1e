"""``context.training``: what only a training task has, the same on every backend's engine.

>>> TrainingContext(HParams({"dropout": 0.5})).hparams["dropout"]
0.5
"""

from __future__ import annotations

from det_sdk.hparams import HParams

__all__ = ["TrainingContext"]


class TrainingContext:
    """What only a training task has: its hyperparameters (``context.training.hparams``)."""

    def __init__(self, hparams: HParams) -> None:
        self.hparams = hparams
