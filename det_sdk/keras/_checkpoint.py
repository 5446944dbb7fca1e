"""The checkpoint format: a whole Keras model and its training state in one directory.

Keras's own formats are far from the disk's speed on Keras 2.15 (``.keras`` loads
~30x slower than a raw read; SavedModel retraces on every save), so a checkpoint is
written against the physical limit instead: every array's raw bytes back to back in
one file, plus small JSON files that say what they are::

    model.json      architecture (``model.to_json()``) and compile config; for a
                    model Keras cannot describe by a config (a subclassed model whose
                    ``__init__`` takes models or other objects, no ``get_config``),
                    ``model_config`` is null and the reason is kept: the checkpoint
                    holds its weights and state, the user's code builds the model
    state.json      index of state.bin: group, name, dtype, shape, offset, nbytes
    state.bin       model weights, optimizer variables, RNG states: raw bytes
    metadata.json   position (epoch, batch), seed, hparams, metrics, versions

The model loads without the training code (``load_model``) unless it has custom
layers, which then come in as ``custom_objects`` as with Keras.

>>> # save_checkpoint(path, model, optimizers, metadata); load_model(path)
"""

from __future__ import annotations

import json
import logging
import platform
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

import det_sdk
from det_sdk.errors import CheckpointCorruptError, CheckpointMismatchError, DetSdkError, UsageError
from det_sdk.keras import _compat, _format

__all__ = [
    "CheckpointCorruptError",
    "Snapshot",
    "StateLayout",
    "WeightsOnlyCheckpointError",
    "framework_versions",
    "load_into",
    "load_model",
    "load_weights",
    "optimizer_variables",
    "read_group",
    "read_metadata",
    "restore_state",
    "save_checkpoint",
    "set_vocabulary",
    "vocabulary",
]

log = logging.getLogger("det_sdk.keras")


class WeightsOnlyCheckpointError(DetSdkError, ValueError):
    """The checkpoint's model has no Keras config (a subclassed model): the user's code
    builds it, ``load_checkpoint_weights`` (or ``load_checkpoint_model(model=...)``)
    loads the weights into it."""


# the format's files, shared with the JAX and PyTorch engine (no TensorFlow there)
FORMAT_VERSION = _format.FORMAT_VERSION
ALIGN = _format.ALIGN
_read_json, _read_arrays, _must_verify = _format.read_json, _format.read_arrays, _format.must_verify
_json_bytes, read_group = _format.json_bytes, _format.read_group


# --- what is in a model's training state -----------------------------------------------


def optimizer_variables(opt: Any, model: Any) -> list[Any]:
    """All variables of an optimizer, created now if it has not run yet."""
    return _compat.optimizer_variables(opt, model.trainable_variables)


def vocabulary(layer: Any) -> list[Any]:
    """A lookup layer's vocabulary (special tokens first) as JSON-able Python values."""
    out: list[Any] = []
    for token in layer.get_vocabulary():
        if isinstance(token, bytes):
            out.append(token.decode("utf-8"))
        elif isinstance(token, (int, np.integer)):
            out.append(int(token))
        else:
            out.append(str(token))
    return out


def set_vocabulary(layer: Any, vocab: Sequence[Any]) -> None:
    """Set a lookup layer's table from :func:`vocabulary`'s list.

    A vocabulary of special tokens alone (a layer never adapted) is left as it is:
    Keras refuses to set an empty one.
    """
    if len(vocab) > len(_special_tokens(layer)):
        layer.set_vocabulary(list(vocab))


def _special_tokens(layer: Any) -> list[Any]:
    inner = getattr(layer, "_lookup_layer", layer)
    mask = [inner.mask_token] if getattr(inner, "mask_token", None) is not None else []
    return mask + [inner.oov_token] * int(getattr(inner, "num_oov_indices", 1) or 0)


class VocabularyState:
    """A lookup layer's table as a checkpoint entry: its vocabulary as UTF-8 JSON bytes.

    ``StringLookup``/``IntegerLookup`` (also inside ``TextVectorization``) keep their
    vocabulary in a hash table, not a variable, on both Keras majors; this gives it
    the ``name``/``numpy()``/``assign()`` of one, so it is saved and restored with
    the model's variables.

    >>> # VocabularyState(model.get_layer("string_lookup")).numpy()  -> uint8 array
    """

    def __init__(self, layer: Any) -> None:
        self.layer = layer
        self.name = self.path = f"{layer.name}/vocabulary"

    def numpy(self) -> np.ndarray:
        text = json.dumps(vocabulary(self.layer), ensure_ascii=False).encode("utf-8")
        return np.frombuffer(text, dtype=np.uint8).copy()

    @property
    def shape(self) -> tuple[int, ...]:
        return self.numpy().shape

    def assign(self, value: np.ndarray) -> None:
        set_vocabulary(self.layer, json.loads(np.asarray(value, np.uint8).tobytes()))


def _state_groups(
    model: Any, optimizers: Sequence[Any], rank: int = 0
) -> list[tuple[str, list]]:
    """Named lists of variables: the model's, its lookup tables', each optimizer's, and
    this rank's RNGs."""
    groups: list[tuple[str, list]] = [("model", _compat.model_variables(model))]
    lookups = [VocabularyState(layer) for layer in _compat.lookup_layers(model)]
    if lookups:
        groups.append(("lookup", lookups))
    for i, opt in enumerate(optimizers):
        groups.append((f"optimizer:{i}", optimizer_variables(opt, model)))
    groups.append((f"rng:{rank}", _compat.rng_variables(model)))
    return groups


# --- saving -----------------------------------------------------------------------------


def framework_versions() -> dict[str, str]:
    return {
        "det_sdk": det_sdk.__version__,
        "tensorflow": tf.__version__,
        "keras": _compat.KERAS_VERSION,
        "keras_package": _compat.KERAS_PACKAGE,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def _compile_config(model: Any, optimizer: Any) -> dict[str, Any] | None:
    try:
        config = model.get_compile_config()
    except Exception:
        return None
    if not config:
        return None
    if optimizer is not None:
        # The optimizer the user built, not a distributed wrapper around it.
        config = dict(config)
        config["optimizer"] = _compat.keras.optimizers.serialize(optimizer)
    return config


def model_config_of(model: Any) -> dict[str, Any]:
    """The model's architecture as JSON-able data (``model.to_json()``, about 1.5 ms)."""
    return json.loads(model.to_json())


def _architecture(model: Any) -> tuple[dict[str, Any] | None, str | None]:
    """``(config, None)``, or ``(None, why)`` for a model Keras has no config of (a
    subclassed model without ``get_config`` whose ``__init__`` takes objects): such a
    model is checkpointed by its weights and state, and built by the user's code."""
    try:
        _compat.check_has_config(model)
        return model_config_of(model), None
    except Exception as err:  # Keras raises TypeError, ValueError, NotImplementedError
        return None, f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"


class StateLayout:
    """Where a model's training state lives, found once and read in one op per checkpoint.

    Walking the model's layers for its variables and random generators takes a
    millisecond or more; reading them one TensorFlow op at a time another. A fit
    builds its layout once (the variables do not change while it runs) and each
    checkpoint reads every variable at once (:func:`_compat.read_variables`).

    Building one also lets the optimizers write their updates to new buffers for
    the step after each snapshot (:func:`_compat.fresh_buffer_updates`), so that
    training on while a snapshot is written costs no copy, from the next time the
    step function is traced.

    >>> # layout = StateLayout(model, [model.optimizer]); snap = layout.snapshot()
    """

    def __init__(self, model: Any, optimizers: Sequence[Any], plain_optimizer: Any = None
                 ) -> None:
        self.model, self.optimizers = model, list(optimizers)
        self.plain_optimizer = plain_optimizer
        self.entries: list[tuple[str, str]] = []  # (group, name) of each variable read
        self.variables: list[Any] = []  # the tf.Variables behind them, same order
        self.lookups: list[VocabularyState] = []
        self.rng_names: list[str] = []
        for group, variables in _state_groups(model, optimizers):
            if group == "lookup":
                self.lookups = list(variables)
                continue
            if group.startswith("rng:"):
                self.rng_names = [_compat.variable_name(v) for v in variables]
            else:
                self.entries += [(group, _compat.variable_name(v)) for v in variables]
            self.variables += [_compat.backing_variable(v) for v in variables]
        changed = [_compat.fresh_buffer_updates(opt) for opt in self.optimizers]
        #: True if this layout changed the optimizers' updates: a step function
        #: traced before (the model trained before this fit) still updates in place.
        self.changed_updates = any(changed)
        self._model_config: tuple[dict[str, Any] | None, str | None] | None = None
        # the compile config, kept while the model's compile() is the same one (Keras
        # makes a new config object at each compile): serializing it costs ~3 ms of
        # CPU per checkpoint, and what changes while training (the learning rate
        # variable) is restored from the state, not from this config
        self._compile: tuple[Any, dict[str, Any] | None] | None = None
        self._json: tuple[Any, bytes] | None = None  # model.json's bytes, for that config

    def fits(self, model: Any, optimizers: Sequence[Any], plain_optimizer: Any = None) -> bool:
        """Whether this layout is ``model``'s with these optimizers (same objects)."""
        return (model is self.model and plain_optimizer is self.plain_optimizer
                and len(optimizers) == len(self.optimizers)
                and all(a is b for a, b in zip(optimizers, self.optimizers)))

    def read(self) -> tuple[list[Any], list[Any]]:
        """This instant's values (tensors, copy on write): the state's and this process's RNGs'."""
        values = _compat.read_variables(self.variables)
        split = len(self.entries)
        return values[:split], values[split:]

    def snapshot(self, rng_states: Sequence[Sequence[Any]] | None = None) -> Snapshot:
        """The state now (one op); ``rng_states[r]`` is process r's RNG state (default:
        this process's alone, as rank 0), as :meth:`read` returned it or numpy arrays."""
        state, own_rng = self.read()
        for opt in self.optimizers:  # their next step writes new buffers: no copy on write
            _compat.arm_fresh_buffers(opt)
        arrays = [(group, name, value) for (group, name), value in zip(self.entries, state)]
        arrays += [("lookup", v.name, v.numpy()) for v in self.lookups]
        for rank, states in enumerate(rng_states if rng_states is not None else [own_rng]):
            arrays += [(f"rng:{rank}", name, st) for name, st in zip(self.rng_names, states)]
        return Snapshot(arrays=arrays, model_json=self.model_json)

    def model_spec(self) -> dict[str, Any]:
        """``model.json``'s content: architecture (found once: a few ms) and compile config.

        Called by the writer, off the training thread: neither changes at a
        checkpoint, and the optimizer's state (its learning rate variable too) is in
        the snapshot itself.
        """
        if self._model_config is None:
            self._model_config = _architecture(self.model)
        config, why = self._model_config
        compiled = getattr(self.model, "_compile_config", None)
        if self._compile is None or compiled is None or self._compile[0] is not compiled:
            self._compile = (compiled, _compile_config(self.model, self.plain_optimizer))
        spec = {"model_config": config, "compile_config": self._compile[1]}
        if config is None:
            spec["weights_only"] = {"class": type(self.model).__name__, "reason": why}
        return spec

    def model_json(self) -> bytes:
        """:meth:`model_spec` encoded as ``model.json`` holds it; encoded again only after
        a new compile (about 0.3 ms of the writer's CPU at each checkpoint otherwise)."""
        spec = self.model_spec()
        if self._json is None or self._json[0] is not self._compile:
            self._json = (self._compile, _json_bytes(spec))
        return self._json[1]


@dataclass
class Snapshot:
    """A checkpoint's content, taken at one instant of training, not yet written.

    The arrays are TensorFlow tensors sharing the variables' buffers: taking them
    copies nothing. The optimizers' next updates write new buffers
    (:func:`_compat.fresh_buffer_updates`), and any other update in place makes
    TensorFlow copy the buffer first while such a tensor is alive (copy on write),
    so the snapshot stays consistent while training goes on. ``write_snapshot``
    turns them into numpy views (DLPack, no copy) and streams them to disk.
    ``model_json`` gives ``model.json``'s bytes when the snapshot is written.
    """

    arrays: list[tuple[str, str, Any]]  # (group, name, tensor or ndarray)
    model_json: Callable[[], bytes]

    @property
    def nbytes(self) -> int:
        """Bytes of array data the snapshot holds (what TensorFlow may have to copy)."""
        # numpy's dtype says itemsize, TensorFlow's says size
        return sum(int(np.prod(a.shape, dtype=np.int64))
                   * int(getattr(a.dtype, "itemsize", None) or a.dtype.size)
                   for _, _, a in self.arrays)


def snapshot(
    model: Any,
    optimizers: Sequence[Any],
    plain_optimizer: Any = None,
    rng_states: Sequence[Sequence[Any]] | None = None,
) -> Snapshot:
    """Take ``model``'s and ``optimizers``' state now (milliseconds, whatever the size).

    ``optimizers[0]`` is the model's optimizer; more follow for multi-optimizer
    models. ``rng_states[r]`` is process r's RNG state (default: this process's
    alone, as rank 0). A caller that checkpoints repeatedly keeps a
    :class:`StateLayout` and calls its ``snapshot`` instead.
    """
    return StateLayout(model, optimizers, plain_optimizer).snapshot(rng_states)


class _DLPack:
    """Hands a tensor to ``numpy.from_dlpack`` (TF makes a capsule; numpy wants a method)."""

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        return tf.experimental.dlpack.to_dlpack(self.tensor)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # CPU


def _host_array(value: Any) -> np.ndarray:
    """A numpy view of a CPU tensor without copying (``.numpy()`` copies, at ~1 GB/s)."""
    if isinstance(value, np.ndarray):
        return value
    try:
        if value.device.endswith("CPU:0") or "CPU" in value.device:
            return np.from_dlpack(_DLPack(value))
    except (AttributeError, TypeError, ValueError, RuntimeError, BufferError):
        pass  # a dtype DLPack cannot carry, a GPU tensor, an old numpy: copy
    return np.asarray(value.numpy())


def write_snapshot(path: Path, snap: Snapshot, metadata: Mapping[str, Any]) -> int:
    """Write a snapshot and ``metadata`` into the directory ``path``; bytes written.

    Every file gets an xxh3-64 checksum in ``checksums.json`` (about 30 GB/s, so
    it costs nothing next to the disk), verified when the checkpoint is read.
    """
    # asarray keeps 0-d shapes; ascontiguousarray would make them 1-d
    arrays = [(group, name, np.asarray(_host_array(value), order="C"))
              for group, name, value in snap.arrays]
    meta = {"format_version": FORMAT_VERSION, "keras_major": _compat.KERAS_MAJOR,
            "framework": framework_versions(), **metadata}
    return _format.write_files(path, arrays, snap.model_json(), meta)


def save_checkpoint(
    path: Path,
    model: Any,
    optimizers: Sequence[Any],
    metadata: Mapping[str, Any],
    plain_optimizer: Any = None,
    rng_states: Sequence[Sequence[np.ndarray]] | None = None,
) -> int:
    """Write ``model``'s architecture and state and ``metadata`` into ``path`` now.

    The synchronous form of ``write_snapshot(path, snapshot(...), metadata)``.
    Returns the number of bytes written.
    """
    return write_snapshot(path, snapshot(model, optimizers, plain_optimizer, rng_states),
                          metadata)


# --- loading ----------------------------------------------------------------------------


def read_metadata(path: Path) -> dict[str, Any]:
    """The checkpoint's ``metadata.json``, checked to be a complete checkpoint."""
    for name in _format.FILES:
        if not (path / name).is_file():
            raise CheckpointCorruptError(f"checkpoint {path} is incomplete: {name} is missing")
    meta = _read_json(path / "metadata.json")
    if not isinstance(meta, dict):
        raise CheckpointCorruptError(f"checkpoint {path}: metadata.json is not a JSON object")
    if meta.get("format_version") not in _format.READABLE_VERSIONS:
        raise CheckpointCorruptError(
            f"checkpoint {path} has format version {meta.get('format_version')!r}; "
            f"this det_sdk reads versions {', '.join(map(str, _format.READABLE_VERSIONS))}"
        )
    if _must_verify(path, meta):
        _format.verify_file(path, "metadata.json", (path / "metadata.json").read_bytes())
    major = meta.get("keras_major", 2)  # checkpoints from before Keras 3 support: Keras 2
    if major != _compat.KERAS_MAJOR:
        raise CheckpointMismatchError(
            f"checkpoint {path} was saved by Keras {major} "
            f"({meta.get('framework', {}).get('keras', 'unknown version')}) but this process "
            f"runs Keras {_compat.KERAS_VERSION}: the two store layers, optimizer state and "
            f"random state differently. Load it with Keras {major} (for Keras 2 on TF >= "
            "2.16: pip install tf-keras and set TF_USE_LEGACY_KERAS=1)"
        )
    return meta


def _as_tensor(arr: np.ndarray) -> Any:
    """A tensor over ``arr``'s memory (DLPack: no copy), or a copy where that cannot be.

    TensorFlow's kernels need 64-byte aligned buffers (an unaligned one aborts the
    process): arrays of checkpoints written before alignment are copied.
    """
    if arr.ctypes.data % ALIGN or not arr.flags.writeable:
        return arr
    try:
        return tf.experimental.dlpack.from_dlpack(arr.__dlpack__())
    except (AttributeError, TypeError, ValueError, BufferError, RuntimeError,
            tf.errors.InvalidArgumentError):
        return arr


def _assign(
    group: str, variables: Sequence[Any], arrays: Sequence[np.ndarray], where: Path
) -> None:
    if len(variables) != len(arrays):
        raise UsageError(
            f"checkpoint {where} holds {len(arrays)} {group} arrays but the model has "
            f"{len(variables)}: is this checkpoint from a different model?"
        )
    for v, arr in zip(variables, arrays):
        if tuple(v.shape) != arr.shape:
            raise UsageError(
                f"checkpoint {where}: {group} variable {v.name} has shape {tuple(v.shape)} "
                f"in the model but {arr.shape} in the checkpoint"
            )
        dtype = _format.numpy_dtype(str(getattr(v.dtype, "name", v.dtype)))
        if arr.dtype != dtype:  # another backend's (JAX counts steps in int32)
            arr = arr.astype(dtype)
        # Into the backing tf.Variable: Keras 3's own assign converts and checks again
        # (5x slower); a tensor over the read buffer is taken without a copy.
        _compat.backing_variable(v).assign(_as_tensor(arr))


def restore_state(
    path: Path, model: Any, optimizers: Sequence[Any], rank: int = 0
) -> dict[str, Any]:
    """Load weights, optimizer and process ``rank``'s RNG state from ``path``.

    Returns the checkpoint's metadata.
    """
    meta = read_metadata(path)
    arrays = _read_arrays(path)
    _assign_groups(path, model, optimizers, arrays, rank)
    return meta


def _assign_groups(
    path: Path,
    model: Any,
    optimizers: Sequence[Any],
    arrays: Mapping[str, list],
    rank: int = 0,
) -> None:
    for group, variables in _state_groups(model, optimizers, rank):
        saved = arrays.get(group, [])
        if group.startswith("optimizer:") and not saved:
            continue  # the run did not track this optimizer when it saved
        if group.startswith("rng:") and len(saved) != len(variables):
            # Random-number state only matters to continue training exactly; a
            # process that did not enable Keras's tf.random generators has none.
            continue
        if group == "lookup":
            if not saved:
                continue  # saved before det_sdk kept lookup tables
            if len(saved) != len(variables):
                raise UsageError(f"checkpoint {path} holds {len(saved)} lookup tables but the "
                                 f"model has {len(variables)} lookup layers: is this checkpoint "
                                 "from a different model?")
            for state, arr in zip(variables, saved):  # vocabularies differ in length
                state.assign(arr)
            continue
        _assign(group, variables, saved, path)
    _compat.refresh_preprocessing(model)


def load_into(path: Path, model: Any) -> Any:
    """Load a checkpoint into a model the caller built (and compiled, or not): weights,
    lookup tables, the compiled optimizer's state and rank 0's random state. For models
    Keras has no config of (``model.json`` says ``weights_only``). Returns ``model``."""
    if not model.built and not _compat.layers_of(model)[1:]:
        raise UsageError("load_checkpoint_model: the model has no weights yet; build it first "
                         "(call it on a batch, e.g. model(x[:1]), or model.build)")
    opt = _compat.model_optimizer(model)
    optimizers = [opt] if opt is not None else []
    for o in optimizers:
        _compat.optimizer_variables(o, model.trainable_variables)
    restore_state(path, model, optimizers)
    return model


def load_weights(path: Path, model: Any) -> dict[str, Any]:
    """Load a checkpoint's model weights and lookup tables into ``model`` (built by the
    caller: subclassed models too); not optimizer or random state. Returns the metadata."""
    meta = read_metadata(path)
    arrays = _read_arrays(path)
    groups = [g for g in _state_groups(model, []) if g[0] in ("model", "lookup")]
    for group, variables in groups:
        saved = arrays.get(group, [])
        if group == "lookup":
            for state, arr in zip(variables, saved):
                state.assign(arr)
        else:
            _assign(group, variables, saved, path)
    _compat.refresh_preprocessing(model)
    return meta


def load_model(path: Path, custom_objects: Mapping[str, Any] | None = None) -> Any:
    """A compiled Keras model (architecture, weights, optimizer state) from a checkpoint."""
    read_metadata(path)
    spec = _read_json(path / "model.json", verify=_must_verify(path))
    if spec.get("model_config") is None:
        only = spec.get("weights_only") or {}
        raise WeightsOnlyCheckpointError(
            f"checkpoint {path} holds the weights and training state of "
            f"{only.get('class', 'a model')}, not its architecture: Keras has no config of "
            f"it ({only.get('reason', 'a subclassed model')}). Build the model with your "
            "code, as for training, then load the weights into it: "
            "context.load_checkpoint_weights(model, trial_id=... | checkpoint_uuid=...), or "
            "context.load_checkpoint_model(..., model=model), which also loads the "
            "optimizer's state if you compiled it, and returns that model. (To rebuild it "
            "from the checkpoint instead, give the class get_config()/from_config().)")
    try:
        model = _compat.keras.models.model_from_json(
            json.dumps(spec["model_config"]), custom_objects=dict(custom_objects or {})
        )
    except (ValueError, TypeError, KeyError) as err:
        raise UsageError(
            f"cannot rebuild the model of checkpoint {path}: {err} "
            "(pass custom layers and functions as custom_objects={name: object}; for a "
            "subclassed model, build it in the script and load the weights with "
            "context.load_checkpoint_weights(model, ...))"
        ) from None
    if not isinstance(model, _compat.keras.Model):  # Keras 2, a subclassed model's config
        raise WeightsOnlyCheckpointError(
            f"cannot rebuild the model of checkpoint {path} from its config (a subclassed "
            "model?): build it in the script and load the weights with "
            "context.load_checkpoint_weights(model, ...) or "
            "context.load_checkpoint_model(..., model=model)")
    optimizers = []
    if spec.get("compile_config"):
        with _compat.keras.utils.custom_object_scope(dict(custom_objects or {})):
            optimizers = _recompile(model, spec["compile_config"], path)
    _assign_groups(path, model, optimizers, _read_arrays(path))
    return model


def _recompile(model: Any, config: Mapping[str, Any], path: Path) -> list[Any]:
    """Compile a rebuilt model as it was; the optimizers whose state to load.

    A model whose class overrides ``compile`` with its own signature (a Distiller's
    ``compile(optimizer, metrics, student_loss_fn, ...)``) cannot be compiled from
    Keras's record of the base ``compile``'s arguments: it gets its optimizer (with
    its state) through the base ``compile``, and the caller compiles it with its own
    arguments before training it further (its ``train_step`` needs them).
    """
    if _compat.overrides_compile(model):
        log.warning(
            "det_sdk: %s overrides compile(); checkpoint %s restored its weights and "
            "optimizer (state included) only: call model.compile(...) with your own "
            "arguments before training or evaluating it", type(model).__name__, path.name)
        optimizer = _compat.keras.optimizers.deserialize(config["optimizer"]) \
            if config.get("optimizer") else None
        if optimizer is None:
            return []
        _compat.keras.Model.compile(model, optimizer=optimizer)
        _compat.optimizer_variables(optimizer, model.trainable_variables)
        return [optimizer]
    model.compile_from_config(config)
    optimizer = getattr(model, "optimizer", None)
    return [optimizer] if optimizer is not None else []
