"""Determined 0.38's PyTorchTrial API on det_sdk: the trial, its context, and their helpers."""

from __future__ import annotations

import enum
import itertools
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from det_sdk.collectives.torch import use_rank_device
from det_sdk.errors import DetSdkError

__all__ = ["Batch", "Epoch", "LRScheduler", "MetricReducer", "PyTorchCallback",
           "PyTorchTrial", "PyTorchTrialContext", "Reducer", "TrialContext",
           "model_device", "move_to", "reset_parameters"]


def move_to(data: Any, device: Any) -> Any:
    """``data`` (tensors in lists, tuples, dicts) on ``device``; anything else as it is.

    >>> import torch
    >>> move_to({"x": [torch.zeros(1)], "n": 3}, "cpu")["x"][0].device
    device(type='cpu')
    """
    import torch

    if isinstance(data, torch.Tensor):
        return data.to(device)
    if isinstance(data, dict):
        return {k: move_to(v, device) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(move_to(v, device) for v in data)
    return data


def model_device(model: Any, default: Any) -> Any:
    """Where ``model`` computes: its first parameter's (or buffer's) device; ``default``
    for a model that holds neither.

    >>> import torch
    >>> model_device(torch.nn.Linear(2, 1), "cuda")
    device(type='cpu')
    """
    # the first one only: a model of a billion parameters need not list them all
    first = next(itertools.chain(model.parameters(), model.buffers()), None)
    return default if first is None else first.device


class PyTorchTrialError(DetSdkError, ValueError):
    """A trial or context used the wrong way (argument, order of calls)."""


class Batch:
    """A training length in batches: ``Trainer.fit(max_length=Batch(100))``."""

    unit = "batches"

    def __init__(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise PyTorchTrialError(f"Batch: length must be an int >= 0, got {value!r}")
        self.value = value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.value == self.value

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.value))


class Epoch(Batch):
    """A training length in epochs: ``Trainer.fit(max_length=Epoch(2))``."""

    unit = "epochs"


class Reducer(enum.Enum):
    """How a training metric's per-batch values combine (Determined's names)."""

    AVG = "avg"
    SUM = "sum"
    MAX = "max"
    MIN = "min"


class MetricReducer:
    """A custom validation metric computed over all the data of all ranks.

    ``update`` it from ``evaluate_batch``; ``per_slot_reduce`` gives this rank's
    partial result, ``cross_slot_reduce`` combines every rank's (in rank order)::

        class Count(MetricReducer):
            def reset(self): self.n = 0
            def update(self, k): self.n += k
            def per_slot_reduce(self): return self.n
            def cross_slot_reduce(self, per_slot): return sum(per_slot)
    """

    def reset(self) -> None:
        raise NotImplementedError

    def per_slot_reduce(self) -> Any:
        raise NotImplementedError

    def cross_slot_reduce(self, per_slot_metrics: list[Any]) -> Any:
        raise NotImplementedError


class PyTorchCallback:
    """Hooks the Trainer calls (Determined's names); override those you need."""

    def on_training_start(self) -> None: ...
    def on_training_epoch_start(self, epoch_idx: int) -> None: ...
    def on_training_epoch_end(self, epoch_idx: int) -> None: ...
    def on_training_workload_end(self, avg_metrics: dict[str, Any],
                                 batch_metrics: Any) -> None: ...
    def on_validation_start(self) -> None: ...
    def on_validation_end(self, metrics: dict[str, Any]) -> None: ...
    def on_checkpoint_save_start(self, checkpoint: dict[str, Any]) -> None: ...
    def on_checkpoint_load_start(self, checkpoint: dict[str, Any]) -> None: ...
    def on_trial_shutdown(self) -> None: ...

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


class LRScheduler:
    """A torch LR scheduler with the step mode the Trainer applies (Determined's class)."""

    class StepMode(enum.Enum):
        STEP_EVERY_EPOCH = 1
        STEP_EVERY_BATCH = 2
        MANUAL_STEP = 3
        STEP_EVERY_OPTIMIZER_STEP = 4

    def __init__(self, scheduler: Any, step_mode: LRScheduler.StepMode,
                 frequency: int = 1) -> None:
        if not isinstance(step_mode, LRScheduler.StepMode):
            raise PyTorchTrialError(f"wrap_lr_scheduler: step_mode must be an "
                                    f"LRScheduler.StepMode, got {step_mode!r}")
        if isinstance(frequency, bool) or not isinstance(frequency, int) or frequency < 1:
            raise PyTorchTrialError(f"wrap_lr_scheduler: frequency must be an int >= 1, "
                                    f"got {frequency!r}")
        self.scheduler, self.step_mode, self.frequency = scheduler, step_mode, frequency

    def step(self, *args: Any, **kwargs: Any) -> None:
        self.scheduler.step(*args, **kwargs)

    def get_last_lr(self) -> list[float]:
        return list(self.scheduler.get_last_lr())

    def state_dict(self) -> dict[str, Any]:
        return dict(self.scheduler.state_dict())

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state_dict)


def reset_parameters(model: Any) -> None:
    """Call ``reset_parameters()`` on every submodule that has one (Determined's helper)."""
    for module in model.modules():
        fn = getattr(module, "reset_parameters", None)
        if callable(fn):
            fn()


class PyTorchTrialContext:
    """What a trial is given: hyperparameters, ranks, and the wrap/step calls.

    Built by :func:`det_sdk.pytorch.init`; ``core`` is its ``det.core`` context.
    """

    def __init__(self, core: Any, *, hparams: Mapping[str, Any],
                 data_config: Mapping[str, Any] | None = None) -> None:

        self._core = core
        self.distributed = core.distributed
        self._hparams = dict(hparams)
        self._data_config = dict(data_config or {})
        self.models: list[Any] = []       # as wrapped (DDP on N ranks)
        self.optimizers: list[Any] = []
        self.lr_schedulers: list[LRScheduler] = []
        self.scalers: list[Any] = []      # GradScalers (AMP), checkpointed
        self._stepped_scalers: list[Any] = []  # stepped in this batch: updated after it
        self.reducers: dict[str, MetricReducer] = {}
        self._steps: dict[int, int] = {}
        self._script_fit_done = False
        self._batch_in_epoch = 0  # where the Trainer is (is_epoch_start/is_epoch_end)
        self._epoch_end = False
        self.device = use_rank_device(self.distributed.local_rank, self.distributed.local_size)

    # -- hyperparameters and sizes
    def get_hparams(self) -> dict[str, Any]:
        """Every hyperparameter of the trial."""
        return dict(self._hparams)

    def get_hparam(self, name: str) -> Any:
        """One hyperparameter; a clear error naming those there are when missing."""
        if name not in self._hparams:
            raise PyTorchTrialError(f"get_hparam: no hyperparameter {name!r}; the trial has "
                                    f"{sorted(self._hparams)}")
        return self._hparams[name]

    def get_data_config(self) -> dict[str, Any]:
        """The config's ``data`` section ({} when there is none)."""
        return dict(self._data_config)

    def get_global_batch_size(self) -> int:
        """``global_batch_size`` from the hyperparameters (required)."""
        gbs = self.get_hparam("global_batch_size")
        if isinstance(gbs, bool) or not isinstance(gbs, int):
            raise PyTorchTrialError(f"hyperparameter global_batch_size must be an int, got {gbs!r}")
        return gbs

    def get_per_slot_batch_size(self) -> int:
        """This rank's share: ``global_batch_size / ranks`` (refused when it does not divide)."""
        try:
            return self.distributed.shard_batch_size(self.get_global_batch_size())
        except ValueError as err:
            raise PyTorchTrialError(f"hyperparameter {err}") from None

    def get_experiment_config(self) -> dict[str, Any]:
        return dict(self._core.info.config or {})

    def get_trial_id(self) -> int:
        return int(self._core.info.trial.trial_id)

    def get_trial_seed(self) -> int:
        return int(self._core.info.trial_seed)

    def get_stop_requested(self) -> bool:
        return bool(getattr(self, "_stop_requested", False))

    def set_stop_requested(self, stop_requested: bool) -> None:
        """Stop training after this batch (checkpoint, validate, exit)."""
        self._stop_requested = bool(stop_requested)

    # -- wrapping
    def wrap_model(self, model: Any) -> Any:
        """Move ``model`` to this rank's device; on N ranks wrap it in DDP (gradients averaged)."""
        import torch

        model = model.to(self.device)
        if self.distributed.size > 1:
            model = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
            if self.scalers:
                _sum_gradients(model)
        self.models.append(model)
        return model

    def wrap_scaler(self, scaler: Any) -> Any:
        """Register ``scaler`` (a ``torch.amp.GradScaler``): checkpointed with the trial,
        stepped by :meth:`step_optimizer` (``scaler=``) and updated once after each batch,
        as Determined's ``wrap_scaler``.

        On N ranks the loss given to :meth:`backward` is divided by N and DDP sums the
        ranks' gradients instead of averaging them: each row's float16 gradient is then
        the one one process computes for it on the global batch, so N ranks skip (and
        back the scale off at) exactly the steps one process does.

        Example::

            scaler = context.wrap_scaler(torch.amp.GradScaler("cuda"))
            context.backward(scaler.scale(loss))
            context.step_optimizer(optimizer, scaler=scaler)
        """
        self.scalers.append(scaler)
        if self.distributed.size > 1:
            for model in self.models:
                _sum_gradients(model)
        return scaler

    def wrap_optimizer(self, optimizer: Any, backward_passes_per_step: int = 1) -> Any:
        """Register ``optimizer`` (checkpointed; stepped by :meth:`step_optimizer`)."""
        if backward_passes_per_step != 1:
            raise PyTorchTrialError("wrap_optimizer: backward_passes_per_step other than 1 is "
                                    "not supported by det_sdk")
        self.optimizers.append(optimizer)
        return optimizer

    def wrap_lr_scheduler(self, lr_scheduler: Any, step_mode: LRScheduler.StepMode,
                          frequency: int = 1) -> Any:
        """Register a scheduler; the Trainer steps it as ``step_mode`` says."""
        wrapped = LRScheduler(lr_scheduler, step_mode, frequency)
        self.lr_schedulers.append(wrapped)
        return lr_scheduler

    def wrap_reducer(self, reducer: MetricReducer | Callable[[list[Any]], Any],
                     name: str | None = None) -> MetricReducer:
        """Register a :class:`MetricReducer` whose result is the validation metric ``name``."""
        if not isinstance(reducer, MetricReducer):
            raise PyTorchTrialError("wrap_reducer: give a MetricReducer instance")
        if not name:
            raise PyTorchTrialError("wrap_reducer: name= (the metric's name) is required")
        self.reducers[name] = reducer
        reducer.reset()
        return reducer

    # -- the step
    def backward(self, loss: Any, **kwargs: Any) -> None:
        """``loss.backward()`` (DDP averages the gradients over the ranks; with a wrapped
        scaler on N ranks, ``loss / N`` and summed: :meth:`wrap_scaler`)."""
        if self.scalers and self.distributed.size > 1:
            loss = loss / self.distributed.size
        loss.backward(**kwargs)

    def step_optimizer(self, optimizer: Any, clip_grads: Callable[[Any], None] | None = None,
                       auto_zero_grads: bool = True, scaler: Any = None) -> None:
        """Step ``optimizer`` (and its per-step schedulers), then zero its gradients.

        ``scaler``: a wrapped ``GradScaler``: its ``step(optimizer)`` (which skips a step
        with non-finite gradients), the gradients unscaled first for ``clip_grads``."""
        if scaler is not None and not any(scaler is s for s in self.scalers):
            raise PyTorchTrialError("step_optimizer: scaler= must be wrapped first "
                                    "(scaler = context.wrap_scaler(GradScaler(...))): its "
                                    "state is checkpointed and it is updated after each batch")
        if clip_grads is not None:
            if scaler is not None:
                scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
            params = [p for g in optimizer.param_groups for p in g["params"]]
            clip_grads(params)
        if scaler is not None:
            scaler.step(optimizer)
            if not any(scaler is s for s in self._stepped_scalers):
                self._stepped_scalers.append(scaler)
        else:
            optimizer.step()
        if auto_zero_grads:
            optimizer.zero_grad()
        for s in self.lr_schedulers:
            if s.step_mode == LRScheduler.StepMode.STEP_EVERY_OPTIMIZER_STEP:
                n = self._steps[id(s)] = self._steps.get(id(s), 0) + 1
                if n % s.frequency == 0:
                    s.step()

    def to_device(self, data: Any) -> Any:
        """``data`` (tensors in lists, tuples, dicts) on this rank's device."""
        return move_to(data, self.device)

    def is_epoch_start(self) -> bool:
        return self._batch_in_epoch == 0

    def is_epoch_end(self) -> bool:
        return self._epoch_end


    # -- the script-style API, parallel to det.keras.init()'s: the rest of it (wrap_data,
    # fit, evaluate, predict, ...) is det_sdk.pytorch._script.PyTorchScriptContext's, the
    # subclass init() returns (the Trainer it runs imports this module)
    @property
    def hparams(self) -> dict[str, Any]:
        """The trial's hyperparameters (off the cluster: ``init(hparams=...)``)."""
        return self.get_hparams()


#: Determined's ``det.TrialContext`` annotation in the seed's tutorial
TrialContext = PyTorchTrialContext


class PyTorchTrial:
    """Determined's trial: build data loaders, train a batch, evaluate a batch.

    Two shapes run: Determined 0.38's (``__init__`` wraps the model and optimizer,
    ``train_batch(batch, epoch_idx, batch_idx)`` calls ``context.backward`` and
    ``context.step_optimizer``) and the seed tutorial's (``build_model()``,
    ``optimizer(model)``, ``train_batch(batch, model, epoch_idx, batch_idx)`` returning
    ``{"loss": ...}``, ``evaluate_batch(batch, model)``: the Trainer wraps and steps).
    """

    def __init__(self, context: PyTorchTrialContext) -> None:
        self.context = context

    def build_training_data_loader(self) -> Any:
        raise NotImplementedError

    def build_validation_data_loader(self) -> Any:
        raise NotImplementedError

    def build_callbacks(self) -> dict[str, PyTorchCallback]:
        return {}

    def get_batch_length(self, batch: Any) -> int:
        """Samples in ``batch`` (its first tensor's first axis): validation weights by it."""
        import torch

        while isinstance(batch, (list, tuple)) and batch:
            batch = batch[0]
        if isinstance(batch, dict) and batch:
            return self.get_batch_length(next(iter(batch.values())))
        if isinstance(batch, torch.Tensor):
            return int(batch.shape[0])
        return len(batch)


#: DDP models whose hook sums (a model takes one hook); weakly, as the models come and go
_SUMMING: weakref.WeakSet[Any] = weakref.WeakSet()


def _sum_gradients(model: Any) -> None:
    """Make a DDP ``model`` sum the ranks' gradients (its default hook averages them):
    with the loss divided by N in :meth:`PyTorchTrialContext.backward`, the sum is the
    same average, and each rank's float16 gradients are one process's. Once a model."""
    import torch

    if not isinstance(model, torch.nn.parallel.DistributedDataParallel) or any(
            model is m for m in _SUMMING):
        return

    # a lambda: DDP refuses a hook whose annotations are not its own GradBucket and
    # Future types (and this module's annotations are strings)
    model.register_comm_hook(None, lambda state, bucket: torch.distributed.all_reduce(
        bucket.buffer(), async_op=True).get_future().then(lambda fut: fut.value()[0]))
    _SUMMING.add(model)
