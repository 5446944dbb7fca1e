"""Which Keras runs: found once, when det_sdk's Keras front is first imported.

``tf.keras`` is Keras 3 on TensorFlow 2.16-2.21 and Keras 2 on TensorFlow 2.15 (or
``tf-keras`` on newer TF with ``TF_USE_LEGACY_KERAS=1``). This module only reads
which one; :mod:`._impl` picks the matching implementations.

>>> KERAS_MAJOR in (2, 3)
True
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

import tensorflow as tf

__all__ = ["KERAS_MAJOR", "KERAS_PACKAGE", "KERAS_VERSION", "MULTI_WORKER_FIT", "keras"]

#: The Keras that ``from tensorflow import keras`` gives the user's script.
keras: Any = tf.keras


def _keras_identity() -> tuple[str, str]:
    """(distribution name, version) of the Keras behind ``tf.keras``."""
    module = getattr(tf.keras, "__name__", "") or ""
    version = getattr(tf.keras, "__version__", None)
    if module.startswith("tf_keras") or "tf_keras" in module:
        return "tf-keras", version or importlib.metadata.version("tf-keras")
    if version is None:
        try:
            version = importlib.metadata.version("keras")
        except importlib.metadata.PackageNotFoundError:  # pragma: no cover - odd installs
            version = "unknown"
    return "keras", str(version)


KERAS_PACKAGE, KERAS_VERSION = _keras_identity()
KERAS_MAJOR = int(KERAS_VERSION.split(".")[0]) if KERAS_VERSION[:1].isdigit() else 2
#: Whether Keras's own fit trains under tf.distribute.MultiWorkerMirroredStrategy: Keras 2
#: does; Keras 3 cannot (keras-team/keras#20585), so its workers train as Horovod's
MULTI_WORKER_FIT = KERAS_MAJOR < 3
