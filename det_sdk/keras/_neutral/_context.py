"""The context ``det.keras.init()`` returns on JAX and PyTorch: the TensorFlow engine's API
(``hparams``, ``distributed``, ``wrap_data``, ``wrap_optimizer``, ``fit``, ``evaluate``,
``predict``, ``load_checkpoint_model``, ``config_data``), trained by Keras 3's own
``model.fit`` (see :mod:`det_sdk.keras._neutral`).

>>> NeutralKerasContext.fit.__doc__.splitlines()[0]
'Train ``model`` as ``model.fit`` would, with checkpoints, metrics and resumption.'
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import Any

import keras

from det_sdk.core._context import Context
from det_sdk.engine.policy import TrainingPolicy
from det_sdk.engine.signals import MASTER_STOP
from det_sdk.errors import ArgumentTypeError, StateError, UsageError
from det_sdk.hparams import HParams
from det_sdk.info import ClusterInfo
from det_sdk.keras._neutral import _data, _state
from det_sdk.keras._neutral._backend import Backend
from det_sdk.keras._neutral._train import run_fit
from det_sdk.keras._training import TrainingContext

__all__ = ["NeutralKerasContext", "TrainingContext"]


class NeutralKerasContext:
    """The training script's handle on distribution, records and checkpoints.

    Made by :func:`det_sdk.keras.init`, never directly::

        context = det.keras.init()
        x, y = context.wrap_data(x, y)
        model.compile(optimizer=context.wrap_optimizer(keras.optimizers.SGD(0.01)), ...)
        context.fit(model, x=x, y=y, validation_data=(xv, yv), epochs=3)
    """

    def __init__(self, *, core: Context, backend: Backend, hparams: HParams | None,
                 config_data: Mapping[str, Any], policy: TrainingPolicy,
                 info: ClusterInfo | None = None) -> None:
        self.core = core
        self.distributed = core.distributed
        self.backend = backend.name
        self._backend = backend
        self.config_data: dict[str, Any] = dict(config_data)
        self.info = info
        self._policy = policy
        self._hparams = hparams
        self._training = TrainingContext(hparams) if hparams is not None else None
        self._fitted = False
        self._position = (0, 0)  # (steps, epoch) where the fit ended: evaluations go there

    @property
    def trial_id(self) -> int | str | None:
        """This run's id locally (``det-runs/<id>``), the trial's id on the cluster."""
        return self.core.run_id

    @property
    def seed(self) -> int:
        """The run's seed (recorded; a resumed run reuses it)."""
        return self._policy.seed

    @property
    def training(self) -> TrainingContext:
        """The training side of the context (``context.training.hparams``)."""
        if self._training is None:
            raise StateError("context.training: this task is a job (det job run), which does "
                             "not train: it has no hyperparameters")
        return self._training

    @property
    def hparams(self) -> HParams:
        """Shorthand for ``context.training.hparams``."""
        return self.training.hparams

    def wrap_data(self, x: Any, y: Any = None, sample_weight: Any = None) -> Any:
        """Check data for ``fit``; returns what it was given (numpy arrays, a PyDataset).

        ``fit`` cuts every global batch between the processes itself.

        Example::

            x, y = context.wrap_data(x, y)
        """
        return _data.wrap_data(x, y, sample_weight)

    def wrap_optimizer(self, optimizer: Any, compression: Any = None) -> Any:
        """Track ``optimizer``; on N processes make it apply what one process would.

        Example::

            opt = context.wrap_optimizer(keras.optimizers.Adam(1e-3))
        """
        if not isinstance(optimizer, keras.optimizers.Optimizer):
            raise ArgumentTypeError("wrap_optimizer: a keras.optimizers.Optimizer is expected, "
                                    f"got {type(optimizer).__name__}")
        if compression is not None:
            raise UsageError(f"wrap_optimizer: compression is Horovod's (TensorFlow); on "
                             f"{self.backend} gradients are averaged uncompressed")
        return self._backend.wrap_optimizer(optimizer, self.distributed)

    def fit(self, model: Any, x: Any = None, y: Any = None, batch_size: int | None = None,
            epochs: int = 1, **kwargs: Any) -> Any:
        """Train ``model`` as ``model.fit`` would, with checkpoints, metrics and resumption.

        Takes ``x``, ``y``, ``batch_size`` (this process's share of a global batch:
        ``context.distributed.shard_batch_size(global)``), ``epochs``,
        ``validation_data`` (or ``x_val``/``y_val``), ``sample_weight``, ``callbacks``,
        ``shuffle``, ``verbose``, ``validation_freq``, ``class_weight``. A resumed run
        starts from its latest checkpoint, mid-epoch included. Returns the Keras
        ``History`` of the whole run.

        Example::

            hist = context.fit(model, x=x, y=y, batch_size=32, epochs=3,
                               validation_data=(x_val, y_val))
        """
        stage = kwargs.pop("stage", None)
        if self._fitted or stage is not None:
            raise UsageError(_one_fit_only(self.backend, "stage=" if stage is not None
                                           else "a second context.fit"))
        self._fitted = True
        kwargs.update(x=x, y=y, batch_size=batch_size, epochs=epochs)
        outcome = run_fit(self.core, self._backend, self._policy, self._hparams, model, kwargs)
        self._position = (outcome.position.steps_completed, outcome.position.epoch)
        if outcome.stopped is not None:
            self._exit_stopped(outcome.stopped)
        return outcome.history

    def _exit_stopped(self, stop: Any) -> None:
        pos = stop.position
        if self.distributed.is_chief:
            if stop.reason == MASTER_STOP:
                self.core.preempt.acknowledge_preemption_signal()
            saved = f"checkpoint {stop.uuid} saved" if stop.uuid else "no checkpoint saved"
            print(f"det_sdk: stopped by {stop.reason} at epoch {pos.epoch}, batch {pos.batch}; "
                  f"{saved}. {self.core.resume_hint()}".rstrip(), file=sys.stderr, flush=True)
        self.close()
        raise SystemExit(130 if stop.reason == "SIGINT" else 0)

    def evaluate(self, model: Any, x: Any = None, y: Any = None, **kwargs: Any) -> Any:
        """``model.evaluate``, recorded as metrics (group ``evaluation``).

        On N processes each evaluates all of ``x`` (the results are one process's).

        Example::

            loss, acc = context.evaluate(model, x_test, y_test)
        """
        want_dict = kwargs.pop("return_dict", False)
        results = model.evaluate(x, y, return_dict=True, **kwargs)
        results = {k: float(v) for k, v in results.items()}
        if self.distributed.is_chief:
            steps, epoch = self._position
            self.core.train.report_metrics("evaluation", steps, results, epoch)
        if want_dict:
            return results
        # Keras's own order ([loss, *metrics]), not the dict's (sorted by name)
        return model._flatten_metrics_in_order(results)

    def predict(self, model: Any, x: Any, *, output: str | os.PathLike[str] | None = None,
                **kwargs: Any) -> Any:
        """``model.predict`` of every row of ``x``, on every process.

        ``output="DIR"`` streams instead (docs/batch-inference.md): each process writes
        its share of the batches' predictions to part files in ``DIR``, in the input's
        order; a rerun into ``DIR`` skips the parts written. Returns a
        ``StreamedPredictions``; read the rows with ``det_sdk.load_predictions(DIR)``.

        Example::

            probs = context.predict(model, x_test, batch_size=256)
            context.predict(model, x_test, output="predictions", batch_size=4096)
        """
        if output is not None:
            from det_sdk.keras._neutral._predict import predict_to

            return predict_to(self.core, self._backend, model, x, output, **kwargs)
        return self._backend.predict(model, x, self.distributed, **kwargs)

    def load_checkpoint_model(self, trial_id: int | str | None = None,
                              checkpoint_uuid: str | None = None, *, best: bool = False,
                              custom_objects: Mapping[str, Any] | None = None,
                              model: Any = None) -> Any:
        """A compiled model (architecture, weights, optimizer state) from a checkpoint of
        any backend's.

        Example::

            model = context.load_checkpoint_model(trial_id=1)
        """
        if (trial_id is None) == (checkpoint_uuid is None):
            raise UsageError("load_checkpoint_model: give exactly one of trial_id or "
                             "checkpoint_uuid")
        uuid = checkpoint_uuid or self.core.checkpoint.select(trial_id, best=best)
        return load_model(self.core.checkpoint.checkpoint_path(uuid), custom_objects, model)

    def close(self) -> None:
        """Deliver pending records and release the run (``core.close()``)."""
        self.core.close()


def load_model(path: Any, custom_objects: Mapping[str, Any] | None = None,
               model: Any = None) -> Any:
    """The model of checkpoint ``path`` (any backend's), compiled as it was trained."""
    _, arrays = _state.read_checkpoint(path)
    spec = json.loads((path / "model.json").read_bytes())
    if model is None:
        if spec.get("model_config") is None:
            raise UsageError(f"checkpoint {path} holds a model Keras has no config of: build "
                             "it with your code and pass it as model=")
        model = keras.models.model_from_json(json.dumps(spec["model_config"]),
                                             custom_objects=dict(custom_objects or {}))
        if spec.get("compile_config"):
            with keras.utils.custom_object_scope(dict(custom_objects or {})):
                model.compile_from_config(spec["compile_config"])
    _state.apply_arrays(model.weights, arrays.get("model", []), "model", path)
    opt = _state.optimizer_of(model)
    if opt is not None and arrays.get("optimizer:0"):
        _state.apply_arrays(opt.variables, arrays["optimizer:0"], "optimizer", path)
    return model


def _one_fit_only(backend: str, what: str) -> str:
    """The refusal of several fits (stages) in one run on JAX and PyTorch, naming the ways
    to get them.

    >>> "KERAS_BACKEND=tensorflow" in _one_fit_only("jax", "stage=")
    True
    """
    return (f"context.fit on {backend}: {what} refused: a run on JAX or PyTorch holds one "
            "fit (its checkpoints resume one model); several fits as stages of one run "
            "(context.fit(..., stage=...)) are the TensorFlow engine's. Either run the "
            "script with KERAS_BACKEND=tensorflow, or start a new run for the next fit with "
            "det.keras.init() (after context.close()) and load the first fit's model in it "
            "with context.load_checkpoint_model(trial_id=...)")
