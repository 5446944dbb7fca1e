"""The script's callbacks' state on JAX and PyTorch: saved in each checkpoint, restored on
resume, and carried between the ``model.fit`` calls of one ``context.fit``.

Keras's ``EarlyStopping``, ``ReduceLROnPlateau``, ``ModelCheckpoint`` and ``TensorBoard``
reset their counters and best values at each ``on_train_begin``; a ``context.fit`` makes
several ``model.fit`` calls (a resume inside an epoch, a searcher length), so without this
a resumed run would stop at another epoch and reduce its learning rate at others. The
state, its names and its encoding are the TensorFlow engine's
(``det_sdk.keras._callback_codec``): a checkpoint's ``"callbacks"`` entry reads the same on
every backend. A callback with ``get_state()``/``set_state()`` saves what they give;
``CSVLogger`` its file's length (a resume cuts the rows written after the checkpoint).
The learning rate ``ReduceLROnPlateau`` set is an optimizer variable: the checkpoint's
optimizer arrays carry it.

>>> states = CallbackStates([])
>>> states.collect()
{'version': 1, 'states': {}}
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import keras

from det_sdk.keras._callback_codec import (
    CALLBACK_STATE_COMMON,
    StateKeeper,
    callback_names,
)

__all__ = ["CallbackStates", "state_attributes"]

# Keras 3's own additions to the common table (the TensorFlow engine's _compat has them too)
_KERAS3_EXTRA: dict[str, tuple[str, ...]] = {"TensorBoard": ("_global_test_batch",)}


def state_attributes(cb: Any) -> tuple[str, ...]:
    """The attributes that hold ``cb``'s state between epochs (none for other callbacks).

    >>> state_attributes(keras.callbacks.EarlyStopping())[:2]
    ('wait', 'best')
    >>> state_attributes(keras.callbacks.History())
    ()
    """
    for name, attrs in CALLBACK_STATE_COMMON.items():
        cls = getattr(keras.callbacks, name, None)
        if cls is not None and isinstance(cb, cls):
            return attrs + _KERAS3_EXTRA.get(name, ())
    return ()


def _opted_in(cb: Any) -> bool:
    return callable(getattr(cb, "get_state", None)) and callable(getattr(cb, "set_state", None))


def _is_csv(cb: Any) -> bool:
    return isinstance(cb, keras.callbacks.CSVLogger)


def _state_of(cb: Any) -> dict[str, Any] | None:
    if _opted_in(cb):
        return {"get_state": cb.get_state()}
    state: dict[str, Any] = {}
    if _is_csv(cb):
        if cb.csv_file is not None and not getattr(cb.csv_file, "closed", False):
            cb.csv_file.flush()
        path = os.fspath(cb.filename)
        state["csv_bytes"] = os.path.getsize(path) if os.path.isfile(path) else 0
    for attr in state_attributes(cb):
        if hasattr(cb, attr):
            state[attr] = getattr(cb, attr)
    return state or None


def _set_state(cb: Any, state: Mapping[str, Any]) -> None:
    if "get_state" in state:
        if _opted_in(cb):
            cb.set_state(state["get_state"])
        return
    for attr, value in state.items():
        if attr == "csv_bytes":
            continue
        if attr == "best_weights" and value is not None:
            value = list(value)  # Keras's set_weights takes a list
        setattr(cb, attr, value)


class CallbackStates(StateKeeper, keras.callbacks.Callback):
    """Placed after the script's callbacks in each ``model.fit`` call: at
    ``on_train_begin`` (after theirs reset them) it puts back the state the previous call
    ended with, or the checkpoint's; at ``on_train_end`` it keeps theirs for the next call
    (:class:`~det_sdk.keras._callback_codec.StateKeeper`). :meth:`before` runs before
    them (a CSVLogger appends instead of starting anew).

    ``callbacks`` is the script's whole list (the names count over it, alike on every
    process).
    """

    def __init__(self, callbacks: Sequence[Any]) -> None:
        super().__init__()
        self.keep(list(zip(callback_names(callbacks), callbacks)))

    def state_of(self, cb: Any) -> dict[str, Any] | None:
        return _state_of(cb)

    def set_state(self, cb: Any, state: Mapping[str, Any]) -> None:
        _set_state(cb, state)

    def before(self) -> keras.callbacks.Callback:
        """The callback to place before the script's."""
        return _Before(self)

    def prepare_files(self) -> None:
        """A resumed CSVLogger's file cut back to the checkpoint's rows; a later call's
        appended to, with no second header."""
        for name, cb in self._named:
            if not _is_csv(cb):
                continue
            if name in self._csv_cut:
                path = os.fspath(cb.filename)
                nbytes = self._csv_cut.pop(name)
                if os.path.isfile(path) and os.path.getsize(path) > nbytes:
                    with open(path, "r+b") as f:
                        f.truncate(nbytes)
                cb.append = True
            elif self._started:
                cb.append = True


class _Before(keras.callbacks.Callback):
    def __init__(self, states: CallbackStates) -> None:
        super().__init__()
        self.states = states

    def on_train_begin(self, logs: Any = None) -> None:
        self.states.prepare_files()
