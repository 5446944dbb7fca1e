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
           "callback_names", "decode", "encode"]

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
