"""Determined's ``TFKerasTrial`` class API, as a thin layer over ``det.keras.init()``.

Code written for Determined's older Keras API runs here with its imports renamed::

    from det_sdk.keras import InMemorySequence, TFKerasTrial

    class MNISTTrial(TFKerasTrial):
        def __init__(self, context):
            self.context = context

        def build_model(self):
            model = self.context.wrap_model(keras.Sequential([...]))
            model.compile(optimizer="adam", loss=..., metrics=[...])
            return model

        def build_training_data_loader(self):
            return InMemorySequence(data=x, labels=y,
                                    batch_size=self.context.get_global_batch_size())

        def build_validation_data_loader(self):
            return x_val, y_val

``python -m det_sdk.keras.trial model_def:MNISTTrial --config const.yaml`` runs it
off the cluster; a config with ``entrypoint: model_def:MNISTTrial`` runs it on the
cluster (``det_sdk.config`` turns that entrypoint into the same command).

Nothing here trains, checkpoints, reports or searches by itself: :func:`run_trial`
builds the trial's model and data, turns the data into what ``context.fit`` takes
(through ``wrap_data``, so several processes share the data as one process would
use it) and calls ``context.fit``. Everything else is det_sdk's one training loop.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from det_sdk.config import ConfigError, ExperimentConfig, parse_experiment_config
from det_sdk.distributed import Processes
from det_sdk.engine.run import load_config
from det_sdk.errors import ArgumentTypeError, DetSdkError, UsageError
from det_sdk.hparams import HParamKeyError
from det_sdk.info import get_cluster_info
from det_sdk.keras import _compat, _data
from det_sdk.keras._context import KerasContext
from det_sdk.keras._init import init

__all__ = [
    "InMemorySequence",
    "SequenceAdapter",
    "TFKerasTensorBoard",
    "TFKerasTrial",
    "TFKerasTrialContext",
    "TrialDistributed",
    "TrialLoadError",
    "load_trial_class",
    "run_trial",
]

log = logging.getLogger("det_sdk.keras")


class TrialLoadError(DetSdkError, ImportError):
    """The ``module:Class`` of an entrypoint cannot be loaded, or is no TFKerasTrial."""


# --- data kinds -----------------------------------------------------------------------------


class InMemorySequence(_compat.SequenceBase):
    """Numpy data in memory as a ``keras.utils.Sequence`` of ``batch_size`` rows.

    ``data`` is an array, a list of arrays or a dict of arrays (multi-input models);
    ``labels`` likewise; ``sample_weights`` an optional array of one weight per row.
    ``batch_size`` is the batch that one process would train on: with several
    processes each trains on its share of every such batch, so a trial trains the
    same on any number of slots (give the global batch size, as the tutorial does).

    >>> x_train = np.zeros((60000, 28, 28), dtype=np.uint8)  # MNIST's shape
    >>> y_train = np.zeros(60000, dtype=np.uint8)
    >>> seq = InMemorySequence(data=x_train, labels=y_train, batch_size=32)
    >>> len(seq), seq[0][0].shape
    (1875, (32, 28, 28))
    """

    def __init__(self, data: Any, labels: Any, batch_size: int,
                 sample_weights: Any = None) -> None:
        super().__init__()
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise UsageError("InMemorySequence: batch_size must be a positive int, got "
                             f"{batch_size!r}")
        for name, value in (("data", data), ("labels", labels)):
            if not _data.is_array_data(value):
                raise ArgumentTypeError(f"InMemorySequence: {name} must be a numpy array, or a "
                                        f"list or dict of them; got {type(value).__name__}")
        named = {"data": data, "labels": labels}
        if sample_weights is not None:
            named["sample_weights"] = np.asarray(sample_weights)
        rows = {k: _data.num_rows(v) for k, v in named.items()}
        if len(set(rows.values())) > 1:
            detail = ", ".join(f"{k}: {n}" for k, n in rows.items())
            raise UsageError(f"InMemorySequence: different numbers of rows ({detail})")
        self.data, self.labels = data, labels
        self.sample_weights = named.get("sample_weights")
        self.batch_size = batch_size
        self._rows = rows["data"]

    def __len__(self) -> int:
        return -(-self._rows // self.batch_size)

    def __getitem__(self, index: int) -> tuple[Any, ...]:
        if not 0 <= index < len(self):
            raise IndexError(f"InMemorySequence: batch {index} of {len(self)}")
        start, stop = index * self.batch_size, (index + 1) * self.batch_size
        parts = [self.data, self.labels] + (
            [self.sample_weights] if self.sample_weights is not None else [])
        return tuple(_data.slice_rows(p, start, stop) for p in parts)

    def arrays(self) -> tuple[Any, Any, Any]:
        """``(data, labels, sample_weights)`` as given.

        >>> x, y = np.zeros((100, 4)), np.zeros(100)
        >>> x2, y2, w = InMemorySequence(data=x, labels=y, batch_size=32).arrays()
        >>> x2 is x, y2 is y, w
        (True, True, None)
        """
        return self.data, self.labels, self.sample_weights


class SequenceAdapter:
    """A ``keras.utils.Sequence`` with how to load it: ``workers`` background loaders.

    det_sdk loads batches with ``workers`` threads, in order (0: in the training
    thread's pipeline, as 1). ``use_multiprocessing`` is accepted for Determined's
    code and loads with threads too (det_sdk's input pipeline is ``tf.data``, which
    runs Python in threads); ``max_queue_size`` is accepted and unused.

    >>> sequence = InMemorySequence(data=np.zeros((100, 4)), labels=np.zeros(100),
    ...                             batch_size=32)
    >>> adapter = SequenceAdapter(sequence, workers=2, use_multiprocessing=False)
    >>> adapter.workers, adapter.use_multiprocessing
    (2, False)
    """

    def __init__(self, sequence: Any, use_multiprocessing: bool = False, workers: int = 1,
                 max_queue_size: int = 10) -> None:
        if not isinstance(sequence, _compat.SequenceBase):
            raise ArgumentTypeError("SequenceAdapter: sequence must be a keras.utils.Sequence, "
                                    f"got {type(sequence).__name__}")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise UsageError(f"SequenceAdapter: workers must be an int >= 0, got {workers!r}")
        if isinstance(max_queue_size, bool) or not isinstance(max_queue_size, int) \
                or max_queue_size < 1:
            raise UsageError("SequenceAdapter: max_queue_size must be a positive int, got "
                             f"{max_queue_size!r}")
        self.sequence = sequence
        self.use_multiprocessing = bool(use_multiprocessing)
        self.workers = workers
        self.max_queue_size = max_queue_size


class TFKerasTensorBoard(_compat.keras.callbacks.TensorBoard):
    """Keras's TensorBoard callback, writing where det_sdk keeps the trial's TensorBoard.

    Return it from ``keras_callbacks``; its ``log_dir`` is set when the trial runs:
    ``<run>/tensorboard/keras`` locally, the trial's storage on the cluster (where
    ``det tensorboard EXP_ID`` reads). Other arguments are Keras's (``update_freq``,
    ``histogram_freq``, ...). Only the chief process writes.

    >>> def keras_callbacks(self):
    ...     return [TFKerasTensorBoard(update_freq="epoch", histogram_freq=1)]
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("log_dir", None)  # the trial's directory, not the user's
        if args:
            args = args[1:]  # Keras's first positional argument is log_dir
        self._det_args, self._det_kwargs = args, kwargs
        super().__init__(*args, **kwargs)

    def use_dir(self, log_dir: str | os.PathLike[str]) -> None:
        """Write into ``log_dir`` (det_sdk calls this before training).

        >>> TFKerasTensorBoard(update_freq="epoch").use_dir("det-runs/1/tensorboard/keras")
        """
        super().__init__(str(log_dir), *self._det_args, **self._det_kwargs)


# --- the context ----------------------------------------------------------------------------


class TrialDistributed:
    """A trial's ``context.distributed``: det_sdk's distributed context (``rank``, ``size``,
    ``local_rank``, ``allgather``, ...) plus the getters Determined's code calls.

    Example::

        context.distributed.get_size(), context.distributed.rank  # (2, 0)
    """

    def __init__(self, distributed: Processes) -> None:
        self._distributed = distributed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._distributed, name)

    def get_rank(self) -> int:
        """This process's rank among the trial's processes."""
        return self._distributed.rank

    def get_size(self) -> int:
        """How many processes train the trial."""
        return self._distributed.size

    def get_local_rank(self) -> int:
        """This process's rank on its host."""
        return self._distributed.local_rank

    def get_local_size(self) -> int:
        """How many of the trial's processes run on this host."""
        return self._distributed.local_size

    def get_cross_rank(self) -> int:
        """This host's rank among the trial's hosts."""
        return self._distributed.cross_rank

    def get_cross_size(self) -> int:
        """How many hosts the trial's processes run on."""
        return self._distributed.cross_size



class TFKerasTrialContext:
    """What a ``TFKerasTrial`` gets: hyperparameters, config, and the wrappers.

    A thin front over the :class:`~det_sdk.keras.KerasContext` that ``det.keras.init()``
    returns (``context.keras_context``), so a trial and a script share one engine.

    Example::

        context.get_hparam("global_batch_size"), context.get_per_slot_batch_size()  # (64, 32)
    """

    def __init__(self, context: KerasContext, config: ExperimentConfig) -> None:
        self.keras_context = context
        self._config = config
        self._models: list[Any] = []
        self._wrapped: list[Any] = []  # optimizers this context returned (never wrap twice)
        self.datasets_wrapped = 0  # wrap_dataset calls: a loader's dataset must have one
        self.fit_options: dict[str, Any] = {}

    @property
    def distributed(self) -> TrialDistributed:
        """Rank, size and collectives of this trial's processes (``rank``, ``size``,
        ``get_rank()``, ``get_size()``, ...).

        Example::

            self.context.distributed.get_rank()  # 0
        """
        return TrialDistributed(self.keras_context.distributed)

    # --- hyperparameters and config ---------------------------------------------------

    def get_hparams(self) -> dict[str, Any]:
        """All of this trial's hyperparameters.

        Example::

            context.get_hparams()  # {'global_batch_size': 32}
        """
        return self.keras_context.hparams.to_dict()

    def get_hparam(self, name: str) -> Any:
        """One hyperparameter; a ``KeyError`` that lists the known names if absent.

        Example::

            context.get_hparam("learning_rate")  # 0.001
        """
        return self.keras_context.hparams[name]

    def get_experiment_config(self) -> dict[str, Any]:
        """The experiment config, as det_sdk validated it (a plain dict).

        Example::

            context.get_experiment_config()["searcher"]["metric"]  # 'val_accuracy'
        """
        return self._config.model_dump(mode="json")

    def get_data_config(self) -> dict[str, Any]:
        """The config's ``data:`` section.

        Example::

            context.get_data_config().get("mnist_npz")
        """
        return dict(self.keras_context.config_data)

    def get_global_batch_size(self) -> int:
        """``hyperparameters.global_batch_size``: the batch of one step over all processes.

        Example::

            context.get_global_batch_size()  # 64
        """
        try:
            gbs = self.keras_context.hparams["global_batch_size"]
        except KeyError:
            raise HParamKeyError("a TFKerasTrial needs hyperparameters.global_batch_size in "
                                 "the experiment config") from None
        if isinstance(gbs, bool) or not isinstance(gbs, int) or gbs < 1:
            raise UsageError("hyperparameters.global_batch_size must be a positive int, got "
                             f"{gbs!r}")
        return gbs

    def get_per_slot_batch_size(self) -> int:
        """This process's share of the global batch (``global / slots``).

        Example::

            context.get_per_slot_batch_size()  # 32
        """
        return self.distributed.shard_batch_size(self.get_global_batch_size())

    def get_trial_id(self) -> int | None:
        """The trial's id (the local run's id off the cluster).

        Example::

            context.get_trial_id()  # 3
        """
        return self.keras_context.trial_id

    def get_experiment_id(self) -> int | None:
        """The experiment's id on the cluster; None off it.

        Example::

            context.get_experiment_id()  # 1
        """
        info = self.keras_context.info
        return info.experiment_id if info is not None else None

    # --- wrappers ---------------------------------------------------------------------

    def wrap_model(self, model: Any) -> Any:
        """Register the model; its ``compile`` then distributes the optimizer it is given.

        Call it before ``model.compile``: any optimizer (also ``"adam"``) is then made
        one that checkpoints and, with several processes, averages gradients.

        Example::

            model = self.context.wrap_model(keras.Sequential([...]))
            model.compile(optimizer="adam", loss="mse")
        """
        if not isinstance(model, _compat.keras.Model):
            raise ArgumentTypeError("wrap_model: expected a keras.Model, got "
                                    f"{type(model).__name__}")
        if any(m is model for m in self._models):
            return model
        original = model.compile
        context = self

        def compile(*args: Any, **kwargs: Any) -> Any:
            if args:
                kwargs["optimizer"], args = args[0], args[1:]
            kwargs["optimizer"] = context._distributed_optimizer(
                kwargs.get("optimizer", "rmsprop"))  # Keras's default optimizer
            return original(*args, **kwargs)

        # an instance attribute, past Keras's attribute tracking (a function is no state)
        object.__setattr__(model, "compile", compile)
        self._models.append(model)
        return model

    def wrap_optimizer(self, optimizer: Any) -> Any:
        """The optimizer as det_sdk trains it (checkpointed; averaged over processes).

        Not needed for the optimizer given to a wrapped model's ``compile``.

        Example::

            opt = self.context.wrap_optimizer(keras.optimizers.Adam(1e-3))
        """
        wrapped = self.keras_context.wrap_optimizer(optimizer)
        self._wrapped.append(wrapped)
        return wrapped

    def _distributed_optimizer(self, optimizer: Any) -> Any:
        if any(o is optimizer for o in self._wrapped):
            return optimizer
        if isinstance(optimizer, (str, Mapping)):
            optimizer = _compat.keras.optimizers.get(optimizer)
        return self.wrap_optimizer(optimizer)

    def wrap_dataset(self, dataset: Any, shard_dataset: bool = True) -> Any:
        """This process's part of a ``tf.data.Dataset`` (``shard(size, rank)``).

        Wrap right after creating it, before batching, and batch with
        :meth:`get_per_slot_batch_size`. ``shard_dataset=False`` keeps it whole
        (each process then reads all of it, e.g. files already split per process).

        Example::

            ds = self.context.wrap_dataset(tf.data.Dataset.from_tensor_slices((x, y)))
            ds = ds.batch(self.context.get_per_slot_batch_size())
        """
        if not isinstance(dataset, tf.data.Dataset):
            raise ArgumentTypeError("wrap_dataset: expected a tf.data.Dataset, got "
                                    f"{type(dataset).__name__}")
        self.datasets_wrapped += 1
        return self.keras_context.wrap_data(dataset) if shard_dataset else dataset

    def configure_fit(self, verbose: int | None = None, class_weight: Any = None,
                      shuffle: bool | None = None, workers: int | None = None,
                      use_multiprocessing: bool | None = None,
                      max_queue_size: int | None = None) -> None:
        """Options of the ``fit`` det_sdk runs (Determined's ``configure_fit``).

        ``workers`` loads Sequence batches with that many threads;
        ``use_multiprocessing`` and ``max_queue_size`` are accepted and unused.

        Example::

            self.context.configure_fit(verbose=0, class_weight={0: 1.0, 1: 3.0})
        """
        given = {"verbose": verbose, "class_weight": class_weight, "shuffle": shuffle,
                 "workers": workers}
        self.fit_options.update({k: v for k, v in given.items() if v is not None})


# --- the trial ------------------------------------------------------------------------------


class TFKerasTrial:
    """Subclass it: build a compiled model and the training and validation data.

    The data loaders return any of: a tuple ``(x, y)`` or ``(x, y, sample_weights)``
    of numpy arrays (or lists/dicts of them), a ``tf.data.Dataset`` (wrapped with
    ``context.wrap_dataset``), a ``keras.utils.Sequence``, an
    :class:`InMemorySequence` or a :class:`SequenceAdapter`.

    >>> class MyTrial(TFKerasTrial):
    ...     def __init__(self, context):
    ...         self.context = context
    ...     def build_model(self):
    ...         model = self.context.wrap_model(make_model())
    ...         model.compile(optimizer="adam", loss="mse")
    ...         return model
    ...     def build_training_data_loader(self):
    ...         return x_train, y_train
    ...     def build_validation_data_loader(self):
    ...         return x_val, y_val
    """

    def __init__(self, context: TFKerasTrialContext) -> None:
        self.context = context

    def build_model(self) -> Any:
        """A compiled ``keras.Model``, wrapped with ``self.context.wrap_model`` before
        ``compile``."""
        raise NotImplementedError("TFKerasTrial.build_model must be implemented")

    def build_training_data_loader(self) -> Any:
        """The training data (see the class doc for the kinds)."""
        raise NotImplementedError("TFKerasTrial.build_training_data_loader must be implemented")

    def build_validation_data_loader(self) -> Any:
        """The validation data (see the class doc for the kinds)."""
        raise NotImplementedError(
            "TFKerasTrial.build_validation_data_loader must be implemented")

    def keras_callbacks(self) -> list[Any]:
        """Keras callbacks for the training (optional); e.g. :class:`TFKerasTensorBoard`."""
        return []


# --- running a trial ------------------------------------------------------------------------


def load_trial_class(spec: str, directory: str | os.PathLike[str] = ".") -> type[TFKerasTrial]:
    """The class an entrypoint ``module:Class`` names, imported from ``directory``.

    >>> load_trial_class("model_def:MNISTTrial", "examples/mnist_trial")
    <class 'model_def.MNISTTrial'>
    """
    module_name, sep, class_name = spec.partition(":")
    if not sep or not module_name or not class_name:
        raise TrialLoadError(f"entrypoint {spec!r}: expected module:Class, e.g. "
                             "model_def:MNISTTrial")
    where = str(Path(directory).resolve())
    if where not in sys.path:
        sys.path.insert(0, where)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name != module_name.split(".")[0] and err.name != module_name:
            raise  # the module exists but imports something missing: show the real error
        raise TrialLoadError(f"entrypoint {spec!r}: no module {module_name!r} in {where}") \
            from None
    cls = getattr(module, class_name, None)
    if cls is None:
        raise TrialLoadError(f"entrypoint {spec!r}: module {module_name!r} has no "
                             f"{class_name!r}")
    if not (isinstance(cls, type) and issubclass(cls, TFKerasTrial)):
        raise TrialLoadError(f"entrypoint {spec!r}: {class_name} is not a subclass of "
                             "det_sdk.keras.TFKerasTrial")
    return cls


def run_trial(
    trial_class: type[TFKerasTrial],
    *,
    config: str | os.PathLike[str] | Mapping[str, Any] | ExperimentConfig | None = None,
    hparams: Mapping[str, Any] | None = None,
    runs_dir: str | os.PathLike[str] | None = None,
    resume: bool | int | str | None = None,
) -> Any:
    """Train a ``TFKerasTrial``: on the cluster as its trial, else as a local run.

    Off the cluster, ``config`` (a YAML path or mapping) gives the hyperparameters
    and the length (``searcher.max_length``); ``hparams`` gives values for searched
    ones; ``runs_dir`` and ``resume`` are ``det.keras.init()``'s. Returns the
    ``History`` of the whole run.

    Example::

        from model_def import MNISTTrial
        hist = run_trial(MNISTTrial, config="const.yaml")
        hist.history["val_accuracy"][-1]
    """
    if not (isinstance(trial_class, type) and issubclass(trial_class, TFKerasTrial)):
        raise ArgumentTypeError("run_trial: trial_class must be a TFKerasTrial subclass, got "
                                f"{trial_class!r}")
    info = get_cluster_info()
    if info is not None:
        cfg = parse_experiment_config(info.config)
        context = init(hparams=hparams)
    else:
        cfg = _local_config(config)
        context = init(config=cfg, hparams=hparams, runs_dir=runs_dir, resume=resume)
        length = cfg.searcher.max_length if cfg.searcher is not None else None
        if length is None:
            raise ConfigError("invalid experiment config:\n  searcher.max_length: required to run "
                              "a TFKerasTrial (how long to train), e.g. max_length: {epochs: 1}")
        # A trial has no script of its own to give `epochs`: the config is its length,
        # trained to once, as the cluster's single searcher would.
        context.core.searcher.use_local_length(length)
    trial_context = TFKerasTrialContext(context, cfg)
    trial_context.get_global_batch_size()  # a clear error before any user code runs
    trial = trial_class(trial_context)
    model = _built_model(trial, trial_context)
    fit_kwargs = _fit_inputs(trial, trial_context, cfg)
    callbacks = list(trial.keras_callbacks() or [])
    for cb in callbacks:
        if isinstance(cb, TFKerasTensorBoard) and context.core.tensorboard_dir is not None:
            cb.use_dir(Path(context.core.tensorboard_dir) / "keras")
    options = dict(trial_context.fit_options)
    options.pop("workers", None)
    history = context.fit(model, callbacks=callbacks, **{"verbose": 2, **options},
                          **fit_kwargs)
    context.close()
    return history


def _local_config(config: Any) -> ExperimentConfig:
    loaded = load_config(config)  # the argument, else DET_CONFIG's (as det.keras.init reads it)
    if not isinstance(loaded, ExperimentConfig):
        raise ConfigError("a TFKerasTrial needs an experiment config off the cluster: --config "
                          "const.yaml (or DET_CONFIG)")
    return loaded


def _built_model(trial: TFKerasTrial, context: TFKerasTrialContext) -> Any:
    model = trial.build_model()
    if not isinstance(model, _compat.keras.Model):
        raise ArgumentTypeError(f"{type(trial).__name__}.build_model must return a keras.Model, "
                                f"got {type(model).__name__}")
    if not any(m is model for m in context._models):
        raise UsageError(
            f"{type(trial).__name__}.build_model: wrap the model before compiling it: "
            "model = self.context.wrap_model(model); model.compile(...) (det_sdk distributes "
            "the optimizer given to compile)")
    optimizer = _compat.model_optimizer(model)
    if optimizer is None:
        raise UsageError(f"{type(trial).__name__}.build_model must return a compiled model (call "
                         "model.compile(optimizer=..., loss=...))")
    # Keras may hold the optimizer inside a wrapper of its own (loss scaling)
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    if not any(o is optimizer or o is inner for o in context._wrapped):
        raise UsageError(
            f"{type(trial).__name__}.build_model: the model was compiled before "
            "self.context.wrap_model(model); wrap it first, then compile (det_sdk distributes "
            "the optimizer given to compile)")
    return model


_KINDS = ("a tuple (x, y) or (x, y, sample_weights) of numpy arrays, a tf.data.Dataset, a "
          "keras.utils.Sequence, an InMemorySequence or a SequenceAdapter")


def _fit_inputs(trial: TFKerasTrial, context: TFKerasTrialContext,
                cfg: ExperimentConfig) -> dict[str, Any]:
    """``context.fit``'s data arguments from the trial's two loaders."""
    name = type(trial).__name__
    train = trial.build_training_data_loader()
    val = trial.build_validation_data_loader()
    workers = context.fit_options.get("workers")
    kwargs = _training_data(train, context, f"{name}.build_training_data_loader", workers)
    kwargs.update(_validation_data(val, context, f"{name}.build_validation_data_loader",
                                   workers))
    rows = kwargs.pop("_rows", None)
    if cfg.records_per_epoch is not None and rows is not None and rows != cfg.records_per_epoch:
        log.warning("det_sdk: records_per_epoch is %d but the training data has %d records; "
                    "det_sdk's epoch is one pass over the training data (lengths in epochs "
                    "count passes)", cfg.records_per_epoch, rows)
    return kwargs


def _unadapt(data: Any, workers: int | None) -> tuple[Any, int | None]:
    """A SequenceAdapter's sequence and its loader threads."""
    if isinstance(data, SequenceAdapter):
        if data.use_multiprocessing:
            log.info("det_sdk: SequenceAdapter(use_multiprocessing=True) loads batches with "
                     "threads (det_sdk's input pipeline is tf.data)")
        return data.sequence, data.workers if workers is None else workers
    return data, workers


def _set_workers(seq: Any, workers: int | None) -> Any:
    if workers is not None:
        seq.workers = max(1, workers)  # 0 (the training thread) loads like 1 here
    return seq


def _arrays(data: Any, where: str) -> tuple[Any, Any, Any]:
    if not isinstance(data, tuple) or len(data) not in (2, 3):
        raise ArgumentTypeError(f"{where} returned {type(data).__name__}; expected {_KINDS}")
    x, y, sw = (*data, None)[:3]
    for label, value in (("x", x), ("y", y)):
        if not _data.is_array_data(value):
            raise ArgumentTypeError(f"{where}: {label} of the returned tuple is "
                                    f"{type(value).__name__}; expected numpy arrays ({_KINDS})")
    return x, y, sw


def _training_data(data: Any, context: TFKerasTrialContext, where: str,
                   workers: int | None) -> dict[str, Any]:
    keras_context, dist = context.keras_context, context.distributed
    data, workers = _unadapt(data, workers)
    if isinstance(data, InMemorySequence):
        # Its batch is what one process would train on: N processes each take their
        # share of every such batch (the rows are dealt out by wrap_data), so the
        # trial trains the same on any number of slots.
        x, y, sw = _wrap_arrays(keras_context, *data.arrays())
        return {"x": x, "y": y, "sample_weight": sw, "_rows": _data.num_rows(data.data),
                "batch_size": dist.shard_batch_size(data.batch_size)}
    if isinstance(data, tf.data.Dataset):
        _check_wrapped(context, where)
        return {"x": data}
    if isinstance(data, _compat.SequenceBase):
        # Each of a Sequence's batches is one process's batch (as in Determined):
        # wrap_data deals them out, every batch once per epoch over the processes.
        return {"x": _set_workers(keras_context.wrap_data(data), workers)}
    x, y, sw = _arrays(data, where)
    rows = _data.num_rows(x)
    x, y, sw = _wrap_arrays(keras_context, x, y, sw)
    return {"x": x, "y": y, "sample_weight": sw, "_rows": rows,
            "batch_size": context.get_per_slot_batch_size()}


def _check_wrapped(context: TFKerasTrialContext, where: str) -> None:
    # As in Determined: a dataset must go through wrap_dataset, or with several
    # processes each would train (or validate) on all of it. Checked on one process
    # too, so that a trial that would fail on 2 slots fails on a laptop first.
    if context.datasets_wrapped == 0:
        raise UsageError(f"{where} returned a tf.data.Dataset that was not wrapped: call ds = "
                         "self.context.wrap_dataset(ds) right after creating it (before "
                         "batching), so that each process reads its part")


def _wrap_arrays(context: KerasContext, x: Any, y: Any, sw: Any) -> tuple[Any, Any, Any]:
    if sw is None:
        x, y = context.wrap_data(x, y)
        return x, y, None
    return context.wrap_data(x, y, sw)


def _validation_data(data: Any, context: TFKerasTrialContext, where: str,
                     workers: int | None) -> dict[str, Any]:
    # Validation data goes to fit whole: fit shares numpy arrays and Sequences out to
    # the processes and sums their metric states (datasets are each process's part).
    data, workers = _unadapt(data, workers)
    size = context.distributed.size
    if isinstance(data, InMemorySequence):
        parts = tuple(p for p in data.arrays() if p is not None)
        return {"validation_data": parts,
                "validation_batch_size": max(1, data.batch_size // size)}
    if isinstance(data, tf.data.Dataset):
        _check_wrapped(context, where)
        return {"validation_data": data}
    if isinstance(data, _compat.SequenceBase):
        return {"validation_data": _set_workers(data, workers)}
    x, y, sw = _arrays(data, where)
    return {"validation_data": (x, y) if sw is None else (x, y, sw),
            "validation_batch_size": context.get_per_slot_batch_size()}
