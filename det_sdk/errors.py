"""det_sdk's errors of training: what a script can catch, importable without TensorFlow.

>>> issubclass(DivergenceError, DetSdkError)
True
"""

from __future__ import annotations

__all__ = ["CheckpointCorruptError", "CheckpointMismatchError", "CheckpointWriteError",
           "DetSdkError", "DivergenceError"]


class DetSdkError(Exception):
    """Base of det_sdk's own training errors."""


class CheckpointCorruptError(DetSdkError, RuntimeError):
    """A checkpoint directory whose files are missing, truncated, altered or unreadable."""


class CheckpointWriteError(DetSdkError, OSError):
    """A checkpoint file that could not be written in full (a write that made no progress)."""


class CheckpointMismatchError(DetSdkError, ValueError):
    """A checkpoint that cannot go into this model or this Keras (another major version)."""


class DivergenceError(DetSdkError, RuntimeError):
    """The processes of a distributed run hold different weights: training would be wrong."""
