"""Keras callbacks across versions: the attributes that hold a callback's state between
epochs, ``History``'s model."""

from __future__ import annotations

from typing import Any

from det_sdk.keras._callback_codec import CALLBACK_STATE_COMMON
from det_sdk.keras._compat._impl import impl
from det_sdk.keras._compat._version import keras

__all__ = ["callback_state_attributes", "set_history_model", "swaps_averages_in_between_epochs"]


def set_history_model(history: Any, model: Any) -> None:
    """``history.model = model`` (a read-only property on Keras 3)."""
    history.set_model(model)


# The attributes common to Keras 2 and 3 (det_sdk.keras._callback_codec); each major's
# ``CALLBACK_STATE_EXTRA`` adds its own: ModelCheckpoint's epoch counter (Keras 2's
# ``period``), TensorBoard's test-batch counter (Keras 3).
_CALLBACK_STATE_COMMON = CALLBACK_STATE_COMMON


def callback_state_attributes() -> list[tuple[type, tuple[str, ...]]]:
    """``(Keras callback class, its state attributes)`` for the running Keras.

    >>> [cls.__name__ for cls, _ in callback_state_attributes()][:2]
    ['EarlyStopping', 'ReduceLROnPlateau']
    """
    extra = impl.CALLBACK_STATE_EXTRA
    out = []
    for name, attrs in _CALLBACK_STATE_COMMON.items():
        cls = getattr(keras.callbacks, name, None)
        if cls is not None:
            out.append((cls, attrs + extra.get(name, ())))
    return out


def swaps_averages_in_between_epochs(cb: Any) -> bool:
    """Whether ``cb`` puts the optimizer's moving averages in the model's weights at each
    epoch's end and the weights back at the next epoch's start: Keras 3's
    ``SwapEMAWeights(swap_on_epoch=True)`` (Keras 2 has no such callback).

    >>> swaps_averages_in_between_epochs(keras.callbacks.History())
    False
    """
    swap = getattr(keras.callbacks, "SwapEMAWeights", None)
    return swap is not None and isinstance(cb, swap) and bool(getattr(cb, "swap_on_epoch", False))
