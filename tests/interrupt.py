"""An interruption at an epoch's end, for tests of a resume that run in-process."""

import tensorflow as tf


class Interrupt(Exception):
    """Stands for the process dying at an epoch end, before that epoch's checkpoint."""


class InterruptAfter(tf.keras.callbacks.Callback):
    """Raises :class:`Interrupt` at the end of epoch ``epoch`` (0-based)."""

    def __init__(self, epoch: int) -> None:
        super().__init__()
        self.epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.epoch:
            raise Interrupt(f"after epoch {epoch}")
