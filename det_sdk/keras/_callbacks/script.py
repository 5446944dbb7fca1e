"""The script's own objects as Keras would treat them: a ``Sequence``'s epoch end, and a
warning about random draws that no checkpoint holds."""

from __future__ import annotations

import logging  # noqa: F401 (doctests)
from typing import Any

from det_sdk.keras import _compat
from det_sdk.keras._callbacks._base import DetCallback

__all__ = ["SequenceEpochEnd", "WarnUnsavedRandomness"]


class SequenceEpochEnd(DetCallback):
    """Call a ``keras.utils.Sequence``'s ``on_epoch_end()`` at each epoch end, as Keras does.

    ``context.fit`` feeds a Sequence through its own pipeline (see
    ``_data.sequence_pipeline``), so Keras no longer calls the hook itself.

    >>> # SequenceEpochEnd(my_sequence)
    """

    def __init__(self, seq: Any) -> None:
        super().__init__()
        self.seq = getattr(seq, "full", seq)  # a ShardedSequence's whole Sequence

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.seq.on_epoch_end()


class WarnUnsavedRandomness(DetCallback):
    """Say once, after the first step of a ``fit`` (its step function traced), that the
    model draws random numbers whose state no checkpoint holds (TensorFlow's stateful
    ops: ``tf.random.normal``, Keras 2's ``backend.random_normal``): a resumed run is
    then not bit-equal to an uninterrupted one. One look at the traced graph.

    >>> cb = WarnUnsavedRandomness(logging.getLogger("det_sdk.keras"))
    """

    def __init__(self, logger: Any) -> None:
        super().__init__()
        self.logger = logger
        self._done = False

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self._done:
            return
        self._done = True
        try:
            ops = _compat.unsaved_random_ops(self.model)
        except Exception:  # a look at Keras's internals: it never fails training
            return
        if ops:
            names = ", ".join(f"{op} ({_compat.UNSAVED_RANDOM_OPS[op]})" for op in ops)
            self.logger.warning(
                "det_sdk: %s's training step draws random numbers with TensorFlow's stateful "
                "ops %s, whose state no checkpoint holds: a resumed run draws other numbers "
                "than an uninterrupted one (not bit-equal). To resume exactly, %s",
                type(self.model).__name__, names, _compat.UNSAVED_RANDOM_FIX)
