"""The base of det_sdk's Keras callbacks."""

from __future__ import annotations

from det_sdk.keras import _compat

__all__ = ["DetCallback"]


class DetCallback(_compat.keras.callbacks.Callback):
    """A Keras callback of det_sdk's: it never reads the batch logs as numpy.

    >>> DetCallback()._supports_tf_logs
    True
    """

    def __init__(self) -> None:
        super().__init__()
        # Our hooks never read the batch logs: let Keras skip converting them to
        # numpy on every batch (it does so for callbacks without this flag).
        self._supports_tf_logs = True
