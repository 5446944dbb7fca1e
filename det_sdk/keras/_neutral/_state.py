"""A checkpoint of the JAX and PyTorch engine: the TensorFlow engine's format, so that a
model trained on one backend loads on another (``det_sdk.keras._format``).

Groups of arrays, by position: ``model`` (``model.weights``), ``optimizer:0`` (its
variables), and per process ``rng:<rank>`` (the ``SeedGenerator`` states) and
``metrics:<rank>`` (the metric states of an epoch in progress, for a resume mid-epoch).
``model.json`` holds the architecture and compile config as the TensorFlow engine
writes them.

>>> sorted(GROUPS)
['metrics', 'model', 'optimizer:0', 'rng']
"""

from __future__ import annotations

import contextlib
import json
import platform
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np

import det_sdk
from det_sdk.errors import CheckpointMismatchError, UsageError
from det_sdk.keras import _format

__all__ = ["GROUPS", "apply_arrays", "model_json", "read_checkpoint", "rng_variables",
           "state_arrays", "tensorflow_absent", "write_checkpoint"]

GROUPS = ("model", "optimizer:0", "rng", "metrics")


def rng_variables(model: Any) -> list[Any]:
    """The state variables of the model's ``SeedGenerator`` objects, in layer order."""
    found: list[Any] = []
    seen: set[int] = set()
    for layer in model._flatten_layers(include_self=True):
        for gen in getattr(layer, "_seed_generators", []):
            if id(gen.state) not in seen:
                seen.add(id(gen.state))
                found.append(gen.state)
    return found


def _host(value: Any, copy: bool = False) -> np.ndarray:
    arr = np.asarray(keras.ops.convert_to_numpy(value), order="C")
    return arr.copy() if copy else arr


def optimizer_of(model: Any) -> Any:
    """The model's optimizer, built (its variables exist) or None."""
    opt = getattr(model, "optimizer", None)
    if opt is not None and not opt.built:
        opt.build(model.trainable_variables)
    return opt


def state_arrays(model: Any, copy: bool = False) -> list[tuple[str, str, np.ndarray]]:
    """The model's and its optimizer's state as (group, name, array); ``copy``: arrays of
    their own, not views of buffers training will update in place."""
    out = [("model", v.path, _host(v.value, copy)) for v in model.weights]
    opt = optimizer_of(model)
    if opt is not None:
        out += [("optimizer:0", v.path, _host(v.value, copy)) for v in opt.variables]
    return out


def own_arrays(model: Any, backend_random: list[np.ndarray]
               ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """This process's own state: its random generators' (the model's ``SeedGenerator``
    states, then ``backend_random``: the backend's own) and its metrics'."""
    return ([_host(v.value, copy=True) for v in rng_variables(model)] + list(backend_random),
            [_host(v.value, copy=True) for v in model.metrics_variables])


@contextlib.contextmanager
def tensorflow_absent() -> Iterator[None]:
    """Keras's serialization asks whether TensorFlow is importable (to recognise its
    objects), importing it when it is installed: seconds and half a gigabyte in a JAX or
    PyTorch run. While TensorFlow is not loaded no object of it exists to recognise, so
    for the serialization Keras is told it is absent."""
    from keras.src.utils import module_utils

    lazy = module_utils.tensorflow
    if "tensorflow" in sys.modules or getattr(lazy, "_available", True) is not None:
        yield
        return
    lazy._available = False
    try:
        yield
    finally:
        lazy._available = None


def model_json(model: Any) -> bytes:
    """``model.json`` as the TensorFlow engine writes it (architecture, compile config)."""
    with tensorflow_absent():
        return _model_json(model)


def _model_json(model: Any) -> bytes:
    try:
        config: dict[str, Any] | None = json.loads(model.to_json())
        why = None
    except Exception as err:  # a subclassed model without get_config
        config, why = None, f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
    try:
        compiled = model.get_compile_config() or None
    except Exception:
        compiled = None
    spec: dict[str, Any] = {"model_config": config, "compile_config": compiled}
    if config is None:
        spec["weights_only"] = {"class": type(model).__name__, "reason": why}
    return _format.json_bytes(spec)


def write_checkpoint(path: Path, arrays: Sequence[tuple[str, str, np.ndarray]],
                     model_spec: bytes, metadata: Mapping[str, Any], backend: str) -> int:
    """Write a checkpoint into ``path``; bytes written."""
    meta = {"format_version": _format.FORMAT_VERSION, "keras_major": 3,
            "framework": {"det_sdk": det_sdk.__version__, "keras": keras.__version__,
                          "keras_backend": backend, "numpy": np.__version__,
                          "python": platform.python_version()},
            **metadata}
    return _format.write_files(path, arrays, model_spec, meta)


def read_checkpoint(path: Path) -> tuple[dict[str, Any], dict[str, list[np.ndarray]]]:
    """A checkpoint's metadata and arrays by group, checked complete and intact."""
    for name in _format.FILES:
        if not (path / name).is_file():
            raise CheckpointMismatchError(f"checkpoint {path} is incomplete: {name} is missing")
    meta = _format.read_json(path / "metadata.json", verify=_format.must_verify(path))
    if meta.get("keras_major", 2) != 3:
        raise CheckpointMismatchError(
            f"checkpoint {path} was saved by Keras {meta.get('keras_major', 2)}; JAX and "
            "PyTorch run Keras 3 only")
    return meta, _format.read_arrays(path)


def apply_arrays(variables: Sequence[Any], arrays: Sequence[np.ndarray], group: str,
                 where: Path) -> None:
    """Assign ``arrays`` to ``variables`` in order, refusing a different model's."""
    if len(variables) != len(arrays):
        raise UsageError(
            f"checkpoint {where} holds {len(arrays)} {group} arrays but the model has "
            f"{len(variables)}: is this checkpoint from a different model?")
    for v, arr in zip(variables, arrays):
        if tuple(v.shape) != tuple(arr.shape):
            raise UsageError(
                f"checkpoint {where}: {group} variable {v.path} has shape {tuple(v.shape)} "
                f"in the model but {arr.shape} in the checkpoint")
        v.assign(np.array(arr))  # a copy: the read buffer is not the variable's
