"""The encoding of callbacks' state in a checkpoint's ``metadata.json``, shared by the
TensorFlow engine (``det_sdk.keras._callback_state``) and the JAX/PyTorch engine
(``det_sdk.keras._neutral._callbacks``): no TensorFlow, no Keras import here.

A callback is named by its class name and its index among the ``fit``'s callbacks of
that class; its state is JSON with ``inf``/``nan`` and numpy arrays encoded.

>>> decode(encode({"best": float("inf"), "w": [np.arange(3)]}, "cb"))["best"]
inf
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from det_sdk.errors import DetSdkError

__all__ = ["CALLBACK_STATE_COMMON", "METADATA_KEY", "STATE_VERSION", "CallbackStateError",
           "StateKeeper", "callback_names", "decode", "encode"]

# The attributes that hold a Keras callback's state between epochs (what its
# ``on_train_begin`` resets or its ``__init__`` sets), by class name, on Keras 2 and 3
# alike; each Keras major adds its own (det_sdk.keras._compat). An attribute a callback
# lacks is skipped.
CALLBACK_STATE_COMMON: dict[str, tuple[str, ...]] = {
    "EarlyStopping": ("wait", "best", "stopped_epoch", "best_weights", "best_epoch"),
    "ReduceLROnPlateau": ("wait", "best", "cooldown_counter"),
    "ModelCheckpoint": ("best", "_batches_seen_since_last_saving", "_last_batch_seen"),
    "TensorBoard": ("_global_train_batch",),
}

METADATA_KEY = "callbacks"
STATE_VERSION = 1


class CallbackStateError(DetSdkError, TypeError):
    """A callback's state cannot be saved (a value of a type a checkpoint does not hold)."""


# --- encoding -------------------------------------------------------------------------------


def encode(value: Any, where: str) -> Any:
    """``value`` as JSON-able data (see the module's list of allowed types).

    >>> encode({"n": np.int64(3), "x": -math.inf}, "cb")
    {'n': 3, 'x': {'__float__': '-inf'}}
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, np.bool_):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (float, np.floating)) and not isinstance(value, np.ndarray):
        f = float(value)
        return f if math.isfinite(f) else {"__float__": repr(f)}
    if isinstance(value, np.ndarray) or hasattr(value, "numpy"):
        arr = np.ascontiguousarray(value.numpy() if hasattr(value, "numpy") else value)
        if arr.dtype.kind not in "biuf":
            raise CallbackStateError(
                f"callback state {where}: numpy arrays of dtype {arr.dtype} cannot be saved "
                "(bool, int, uint and float arrays can)")
        return {"__ndarray__": {"dtype": arr.dtype.str, "shape": list(arr.shape),
                                "data": base64.b64encode(arr.tobytes()).decode("ascii")}}
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise CallbackStateError(
                    f"callback state {where}: dict keys must be str, got {type(k).__name__} "
                    f"{k!r}")
            if k.startswith("__") and k.endswith("__"):
                raise CallbackStateError(
                    f"callback state {where}: key {k!r} is reserved (dunder names mark "
                    "encoded values)")
            out[k] = encode(v, f"{where}.{k}")
        return out
    if isinstance(value, (list, tuple)):
        return [encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise CallbackStateError(
        f"callback state {where}: a {type(value).__name__} cannot be saved in a checkpoint; "
        "use None, bool, int, float, str, lists, dicts with str keys, numpy arrays")


def decode(value: Any) -> Any:
    """The value :func:`encode` encoded (tuples come back as lists)."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {"__float__"}:
            return float(value["__float__"])
        if set(value) == {"__ndarray__"}:
            spec = value["__ndarray__"]
            data = base64.b64decode(spec["data"])
            return np.frombuffer(data, dtype=np.dtype(spec["dtype"])).reshape(
                spec["shape"]).copy()
        return {k: decode(v) for k, v in value.items()}
    return value


# --- which callbacks, and their state -------------------------------------------------------


def callback_names(callbacks: Sequence[Any]) -> list[str]:
    """Each callback's stable name: class name and index among those of that class.

    >>> class A: pass
    >>> class B: pass
    >>> callback_names([A(), B(), A()])
    ['A[0]', 'B[0]', 'A[1]']
    """
    seen: dict[str, int] = {}
    names = []
    for cb in callbacks:
        cls = type(cb).__name__
        names.append(f"{cls}[{seen.get(cls, 0)}]")
        seen[cls] = seen.get(cls, 0) + 1
    return names


# --- keeping the state across model.fit calls and checkpoints -------------------------------


class StateKeeper:
    """What both engines' ``CallbackStates`` do alike, mixed in before Keras's
    ``Callback``: take a checkpoint's entry (:meth:`restore`), give the entry to save
    (:meth:`collect`), put the kept state back at ``on_train_begin`` (after the script's
    callbacks reset theirs) and keep it at ``on_train_end`` for the next ``model.fit``
    call. An engine says how a callback's state is read and set (:meth:`state_of`,
    :meth:`set_state`); ``_named`` holds its (name, callback) pairs.

    >>> class Counter:
    ...     n = 0
    >>> class Keeper(StateKeeper):
    ...     def state_of(self, cb): return {"n": cb.n}
    ...     def set_state(self, cb, state): cb.n = state["n"]
    >>> keeper, cb = Keeper(), Counter()
    >>> keeper.keep([("Counter", cb)])
    >>> keeper.restore({"version": 1, "states": {"Counter": {"n": 3}}})
    >>> keeper.on_train_begin()
    >>> cb.n, keeper.collect()["states"]
    (3, {'Counter': {'n': 3}})
    """

    def keep(self, named: Sequence[tuple[str, Any]]) -> None:
        """Keep the state of ``named`` (name, callback) pairs, none carried yet."""
        self._named = list(named)
        self._carried: dict[str, Any] | None = None  # for the next on_train_begin
        self._csv_cut: dict[str, int] = {}  # CSVLogger name -> bytes to cut its file to
        self._started = False  # a model.fit call of this fit has begun

    def state_of(self, cb: Any) -> dict[str, Any] | None:
        """``cb``'s state as a checkpoint holds it (None: it has none)."""
        raise NotImplementedError

    def set_state(self, cb: Any, state: Mapping[str, Any]) -> None:
        """Put ``state`` (of :meth:`state_of`) back into ``cb``."""
        raise NotImplementedError

    def restore(self, saved: Any) -> None:
        """Take a checkpoint's ``"callbacks"`` entry, applied at the next
        ``on_train_begin`` (one of another version, or none, leaves the callbacks fresh)."""
        if not isinstance(saved, Mapping) or saved.get("version") != STATE_VERSION:
            return  # written before callbacks' state was saved, or not by this det_sdk
        states = saved.get("states")
        if not isinstance(states, Mapping):
            return
        self._carried = {k: decode(v) for k, v in states.items()}
        self._csv_cut = {name: int(s["csv_bytes"]) for name, s in self._carried.items()
                         if isinstance(s, Mapping) and "csv_bytes" in s}

    def collect(self) -> dict[str, Any]:
        """The state a checkpoint saves: ``{"version": 1, "states": {name: encoded}}``."""
        states = {}
        for name, cb in self._named:
            state = self.state_of(cb)
            if state is not None:
                states[name] = encode(state, name)
        return {"version": STATE_VERSION, "states": states}

    def on_train_begin(self, logs: Any = None) -> None:
        self._started = True
        if self._carried is None:
            return
        for name, cb in self._named:
            state = self._carried.get(name)
            if isinstance(state, Mapping):
                self.set_state(cb, state)
        self._carried = None

    def on_train_end(self, logs: Any = None) -> None:
        self._carried = {name: state for name, cb in self._named
                         if (state := self.state_of(cb)) is not None}
