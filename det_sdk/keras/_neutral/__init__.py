"""Keras 3 on JAX and on PyTorch: ``det.keras.init()``'s engine where TensorFlow is not the
backend.

TensorFlow runs det_sdk's TensorFlow engine (the rest of ``det_sdk.keras``: ``tf.data``,
Horovod, Keras 2 and 3). This package trains through Keras 3's own, backend-neutral API
(``model.fit`` over a ``keras.utils.PyDataset``, callbacks, ``keras.ops`` variables) and
keeps what differs between JAX and PyTorch in one module each, behind :class:`Backend`
(``_backend``): their process groups and how gradients meet, live variables, determinism.
Nothing else here asks which backend runs.

- ``_backend``: the seam; ``_jax`` and ``_torch``: the two backends;
- ``_data``: ``wrap_data`` and the batches each process trains, in an order a resume can
  continue mid-epoch;
- ``_state``: a checkpoint's arrays, in the TensorFlow engine's format (``_format``);
- ``_fit``: ``context.fit``'s ``model.fit`` calls and det_sdk's callbacks around them;
- ``_context`` and ``_init``: the context ``init()`` returns.

Imports neither TensorFlow nor Horovod.

>>> from det_sdk.keras._neutral._backend import BACKENDS
>>> sorted(BACKENDS)
['jax', 'torch']
"""

from __future__ import annotations

from typing import Any

__all__ = ["init"]


def init(backend_name: str, **kwargs: Any) -> Any:
    """``det.keras.init()`` on backend ``backend_name`` (``_init.init``). Imported when
    called: listing this package (as ``pkgutil.walk_packages`` does) loads no Keras."""
    from det_sdk.keras._neutral._init import init as neutral_init

    return neutral_init(backend_name, **kwargs)
