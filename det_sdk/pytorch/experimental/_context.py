"""``TorchBatchProcessor`` and its context (Determined 0.38's names and signatures)."""

from __future__ import annotations

import abc
import contextlib
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from det_sdk.errors import DetSdkError

if TYPE_CHECKING:
    import torch

    from det_sdk.core import Context
    from det_sdk.pytorch._trial import MetricReducer
    from det_sdk.pytorch.experimental._outputs import OutputDir

__all__ = ["TorchBatchProcessor", "TorchBatchProcessorContext"]

log = logging.getLogger("det_sdk.pytorch")


class ContextError(DetSdkError, ValueError):
    """A TorchBatchProcessorContext call with arguments it cannot use."""


class TorchBatchProcessorContext:
    """What a :class:`TorchBatchProcessor` gets: the device, the ranks, storage, metrics.

    Built by :func:`torch_batch_process`; ``device`` is this process's (``cuda:<local
    rank>`` with GPUs, else the CPU).

    >>> ctx.get_distributed_rank(), ctx.get_distributed_size()  # doctest: +SKIP
    (0, 2)
    """

    def __init__(self, core_context: Context, outputs: OutputDir, device: torch.device) -> None:
        self._core_context = core_context
        self.distributed = core_context.distributed
        self.device = device
        self._outputs = outputs
        self._seq = 1  # the progress checkpoint the files written now belong to
        self._use_default_storage = False
        self._reducers: dict[str, MetricReducer] = {}
        self._using: list[str] = []  # checkpoints/model versions this task reports using

    def get_hparams(self) -> dict[str, Any]:
        """The trial's hyperparameters (locally: ``{}`` or the config's)."""
        return dict(self._core_context.info.hparams or {})

    def to_device(self, data: Any, warned_types: set[type] | None = None) -> Any:
        """``data`` on this process's device: tensors and numpy arrays (made tensors), in
        lists, tuples and dicts, or anything with a ``to()``; other values as they are.

        >>> ctx.to_device({"x": np.zeros(2)})["x"].device  # doctest: +SKIP
        device(type='cpu')
        """
        import numpy as np
        import torch

        if isinstance(data, np.ndarray):
            return torch.from_numpy(data).to(self.device)
        if isinstance(data, Mapping):
            return {k: self.to_device(v, warned_types) for k, v in data.items()}
        if isinstance(data, (list, tuple)) and not hasattr(data, "_fields"):
            return type(data)(self.to_device(v, warned_types) for v in data)
        to = getattr(data, "to", None)
        if callable(to):
            return to(self.device)
        return data

    def get_tensorboard_path(self) -> Path:
        """Where TensorBoard files go to be shown for this task (``det tensorboard``)."""
        path = self._core_context.tensorboard_dir
        path = Path(path) if path is not None else Path("tensorboard")
        path.mkdir(parents=True, exist_ok=True)
        return path

    def prepare_model_for_inference(self, model: torch.nn.Module) -> torch.nn.Module:
        """``model`` in eval mode on this process's device."""
        model.eval()
        return model.to(self.device)

    @contextlib.contextmanager
    def upload_path(self) -> Iterator[Path]:
        """A local folder whose files are kept in this task's storage, under
        ``<output>/rank_<rank>/``, from the next progress checkpoint on.

        Files written here while batches run belong to the next checkpoint: a run
        interrupted before it stores them discards them (the batches run again), one
        interrupted after keeps them: each batch's files are there exactly once.

        >>> with ctx.upload_path() as path:  # doctest: +SKIP
        ...     torch.save(preds, path / f"preds_{batch_idx}.pt")
        """
        self._use_default_storage = True
        yield self._outputs.staging(self._seq, self.distributed.rank)

    @property
    def output_path(self) -> Path:
        """Where ``upload_path``'s files end up (every rank's ``rank_<r>/``)."""
        return self._outputs.root

    def report_metrics(self, group: str, steps_completed: int, metrics: dict[str, Any]) -> None:
        """Report ``metrics`` of ``group`` (``training``, ``validation`` or ``evaluation``)
        at ``steps_completed`` batches; the chief's are kept, as for trials."""
        self._core_context.train.report_metrics(group=group, steps_completed=steps_completed,
                                                metrics=metrics)

    def wrap_reducer(self, reducer: MetricReducer, name: str | None = None) -> MetricReducer:
        """A :class:`det_sdk.pytorch.MetricReducer` whose cross-rank result is reported as
        validation metric ``name`` when the run ends (or is preempted)."""
        from det_sdk.pytorch._trial import MetricReducer

        if not isinstance(reducer, MetricReducer):
            raise ContextError("wrap_reducer: give a det_sdk.pytorch.MetricReducer instance, "
                               f"got {type(reducer).__name__}")
        if not name:
            raise ContextError("wrap_reducer: name= (the metric's name) is required")
        reducer.reset()
        self._reducers[name] = reducer
        return reducer

    def report_task_using_checkpoint(self, checkpoint: Any) -> None:
        """Record that this task uses ``checkpoint`` (a det_sdk ``Checkpoint`` or its uuid):
        kept in the task's progress checkpoints' metadata (``using_checkpoints``)."""
        uuid = checkpoint if isinstance(checkpoint, str) else getattr(checkpoint, "uuid", None)
        if not isinstance(uuid, str):
            raise ContextError("report_task_using_checkpoint: give a Checkpoint (with .uuid) "
                               f"or a uuid string, got {type(checkpoint).__name__}")
        if uuid not in self._using:
            self._using.append(uuid)

    def report_task_using_model_version(self, model_version: Any) -> None:
        """As :meth:`report_task_using_checkpoint`, for a model version's checkpoint."""
        ckpt = getattr(model_version, "checkpoint", None)
        self.report_task_using_checkpoint(ckpt if ckpt is not None else model_version)

    def get_distributed_rank(self) -> int:
        """This process's rank (0 .. size-1)."""
        return int(self.distributed.rank)

    def get_distributed_size(self) -> int:
        """How many processes share the dataset."""
        return int(self.distributed.size)


class TorchBatchProcessor(metaclass=abc.ABCMeta):
    """Subclass it: ``__init__(context)`` builds the model, ``process_batch`` runs a batch.

    >>> class Count(TorchBatchProcessor):
    ...     def __init__(self, context): self.n = 0
    ...     def process_batch(self, batch, batch_idx): self.n += len(batch)
    """

    @abc.abstractmethod
    def __init__(self, context: TorchBatchProcessorContext) -> None:
        """Build what the batches need (the model) from ``context``."""

    @abc.abstractmethod
    def process_batch(self, batch: Any, batch_idx: int) -> None:
        """Process one batch; ``batch_idx`` counts this process's batches (0, 1, ...)."""

    def on_checkpoint_start(self) -> None:  # noqa: B027 (optional hook)
        """Called before each progress checkpoint: write what the batches since the last
        one produced (under ``context.upload_path()`` for exactly-once outputs)."""

    def on_finish(self) -> None:  # noqa: B027 (optional hook)
        """Called once every batch is processed and checkpointed."""
