"""The script-style PyTorch API: ``context.fit(model, optimizer, loss_fn, data)`` without a Trial.

For PyTorch users who write neither a ``PyTorchTrial`` nor a training loop of their own,
parallel to ``det.keras.init()``'s ``context.fit``. What was chosen, and why:

- The **model, optimizer and loss function are the user's objects**, passed to ``fit``
  (PyTorch has no ``compile``): ``fit`` wraps them (DDP on N ranks) and trains them in
  place, so after ``fit`` the user's ``model`` holds the trained weights.
- **Data** is a ``det_sdk.pytorch.DataLoader``, a ``torch`` ``Dataset``, or a tuple of
  tensors / numpy arrays ``(x, y)``; the batch size is the per-slot one
  (``hyperparameters.global_batch_size`` / ranks) unless ``wrap_data`` is given another.
  A batch is ``(inputs, targets)``: ``loss_fn(model(inputs), targets)``.
- **It runs on the Trainer** (one engine): the same exact resume, the same per-sample
  validation on N ranks, checkpoints with Determined's key names, the searcher's length
  on the cluster. ``epochs=`` is ``max_length=Epoch(epochs)``.
- ``metrics`` are ``{name: fn(outputs, targets) -> batch mean}``, reported per sample.
  Validation metrics are named as Keras names them (``val_loss``, ``val_<name>``), so
  ``searcher.metric: val_loss`` (det_sdk's default) works unchanged; ``evaluate``
  returns ``loss`` and ``<name>``, as Keras's ``evaluate`` does.
- ``predict`` returns the outputs of every sample, in the data's order, on every rank;
  ``evaluate`` the per-sample means over every rank's share. ``predict(..., output=DIR)``
  streams them to part files instead, in det_sdk.predictions' format (the Keras front's:
  ``det_sdk.load_predictions`` reads either), and a rerun into ``DIR`` resumes.
- One ``fit`` per ``init()``: a checkpoint holds one model and optimizer, and a resume
  must find the model it saved. Another model: another ``init()`` (another run).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import torch
import xxhash

from det_sdk.errors import ArgumentTypeError, StateError, UsageError
from det_sdk.predictions import (
    PartWriter,
    StopAsked,
    StreamedPredictions,
    digest_arrays,
    gather_failures,
    open_store,
    output_store,
)
from det_sdk.pytorch._data import DataLoader, ShardedBatches
from det_sdk.pytorch._trial import (
    Batch,
    Epoch,
    PyTorchTrial,
    PyTorchTrialContext,
    model_device,
    move_to,
)

__all__ = ["PyTorchScriptContext", "evaluate", "fit", "load_checkpoint_model", "predict",
           "predict_to", "wrap_data"]

Metric = Callable[[Any, Any], Any]


def wrap_data(context: PyTorchTrialContext, data: Any, *, batch_size: int | None = None,
              shuffle: bool = False, drop_last: bool = False, **kwargs: Any) -> DataLoader:
    """``data`` as a det_sdk DataLoader of per-slot batches (see the module's docstring)."""
    if isinstance(data, DataLoader):
        return data
    if isinstance(data, torch.utils.data.DataLoader):
        raise ArgumentTypeError(
            "wrap_data: pass the Dataset (or det_sdk.pytorch.DataLoader), not a "
            "torch.utils.data.DataLoader: det_sdk orders and shards the data itself so "
            "that resume and N ranks are exact")
    if isinstance(data, tuple):
        if not data:
            raise UsageError("wrap_data: an empty tuple; give (inputs, targets)")
        tensors = [torch.as_tensor(np.asarray(a)) if not isinstance(a, torch.Tensor) else a
                   for a in data]
        rows = {int(t.shape[0]) for t in tensors}
        if len(rows) != 1:
            raise UsageError(f"wrap_data: the arrays have different numbers of rows "
                             f"({sorted(rows)})")
        data = torch.utils.data.TensorDataset(*tensors)
    if not (hasattr(data, "__getitem__") and hasattr(data, "__len__")):
        raise ArgumentTypeError(
            "wrap_data: data must be a det_sdk.pytorch.DataLoader, a map-style torch "
            f"Dataset or a tuple of arrays (inputs, targets), got {type(data).__name__}")
    size = context.get_per_slot_batch_size() if batch_size is None else batch_size
    return DataLoader(data, batch_size=size, shuffle=shuffle, drop_last=drop_last, **kwargs)


def _split(batch: Any) -> tuple[Any, Any]:
    if isinstance(batch, (list, tuple)) and len(batch) == 2:
        return batch[0], batch[1]
    raise UsageError("context.fit: a batch must be (inputs, targets), got a "
                     f"{type(batch).__name__}" + (f" of {len(batch)}" if isinstance(
                         batch, (list, tuple)) else "") + "; write a PyTorchTrial for others")


def _checked_metrics(metrics: Mapping[str, Metric] | None) -> dict[str, Metric]:
    metrics = dict(metrics or {})
    for name, fn in metrics.items():
        if not callable(fn):
            raise ArgumentTypeError(f"metrics[{name!r}] must be a function "
                                    f"(outputs, targets) -> batch mean, got {type(fn).__name__}")
    return metrics


class _ScriptTrial(PyTorchTrial):
    """The PyTorchTrial that ``context.fit``'s arguments describe."""

    def __init__(self, context: PyTorchTrialContext, model: Any, optimizer: Any,
                 loss_fn: Callable[[Any, Any], Any], train: DataLoader,
                 validation: DataLoader | None, metrics: dict[str, Metric]) -> None:
        super().__init__(context)
        self.context = context
        self.model = context.wrap_model(model)
        self.opt = context.wrap_optimizer(optimizer)
        self.loss_fn, self.metrics = loss_fn, metrics
        self._train, self._validation = train, validation

    def build_training_data_loader(self) -> DataLoader:
        return self._train

    def build_validation_data_loader(self) -> DataLoader | None:
        return self._validation

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        x, y = _split(batch)
        loss = self.loss_fn(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        x, y = _split(batch)
        out = self.model(x)
        return {"val_loss": self.loss_fn(out, y),
                **{f"val_{name}": fn(out, y) for name, fn in self.metrics.items()}}


def fit(context: PyTorchTrialContext, model: Any, optimizer: Any,
        loss_fn: Callable[[Any, Any], Any], train_data: Any, *,
        validation_data: Any = None, epochs: int | None = None,
        max_length: Batch | None = None, checkpoint_period: Batch | None = None,
        validation_period: Batch | None = None, metrics: Mapping[str, Metric] | None = None,
        reporting_period: Batch | None = None) -> dict[str, float]:
    """Train ``model`` in place; the last validation metrics ({} without validation data)."""
    from det_sdk.pytorch._trainer import Trainer

    if context._script_fit_done:
        raise StateError("context.fit: one fit per det_sdk.pytorch.init() (a checkpoint "
                         "holds one model); open another init() for another model")
    if context.models or context.optimizers:
        raise StateError("context.fit: this context already wraps a model (a Trial's); "
                         "use Trainer(trial, context).fit for a Trial")
    if not isinstance(model, torch.nn.Module):
        raise ArgumentTypeError(f"context.fit: model must be a torch.nn.Module, got "
                                f"{type(model).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ArgumentTypeError(f"context.fit: optimizer must be a torch.optim.Optimizer, "
                                f"got {type(optimizer).__name__}")
    if not callable(loss_fn):
        raise ArgumentTypeError(f"context.fit: loss_fn must be callable (outputs, targets) "
                                f"-> loss, got {type(loss_fn).__name__}")
    if epochs is not None and max_length is not None:
        raise UsageError("context.fit: give epochs or max_length, not both")
    if epochs is not None:
        if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
            raise UsageError(f"context.fit: epochs must be an int >= 1, got {epochs!r}")
        max_length = Epoch(epochs)
    train = wrap_data(context, train_data, shuffle=True)
    validation = None if validation_data is None else wrap_data(context, validation_data)
    trial = _ScriptTrial(context, model, optimizer, loss_fn, train, validation,
                         _checked_metrics(metrics))
    context._script_fit_done = True
    trainer = Trainer(trial, context)
    trainer.fit(max_length=max_length, checkpoint_period=checkpoint_period,
                validation_period=validation_period, reporting_period=reporting_period)
    return dict(trainer.last_validation)


def _batches(context: PyTorchTrialContext, data: Any, batch_size: int | None = None) -> Any:
    loader = wrap_data(context, data, batch_size=batch_size)
    dist = context.distributed
    return loader.get_data_loader(rank=dist.rank, size=dist.size, train=False)


def evaluate(context: PyTorchTrialContext, model: Any, data: Any, *,
             loss_fn: Callable[[Any, Any], Any] | None = None,
             metrics: Mapping[str, Metric] | None = None) -> dict[str, float]:
    """Per-sample means of ``loss`` (with ``loss_fn``) and ``metrics`` over all of ``data``."""
    fns = _checked_metrics(metrics)
    if loss_fn is not None:
        fns = {"loss": loss_fn, **fns}
    if not fns:
        raise UsageError("context.evaluate: nothing to compute; give loss_fn or metrics")
    sums = dict.fromkeys(fns, 0.0)
    count = 0
    device = model_device(model, context.device)  # the data goes where the model is
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for batch in _batches(context, data):
                x, y = _split(move_to(batch, device))
                out = model(x)
                n = len(y)
                for name, fn in fns.items():
                    value = fn(out, y)
                    sums[name] += float(value.item() if isinstance(value, torch.Tensor)
                                        else value) * n
                count += n
    finally:
        model.train(was_training)
    dist = context.distributed
    rows = dist.allgather((sums, count)) if dist.size > 1 else [(sums, count)]
    total = sum(c for _, c in rows)
    return {k: sum(s[k] for s, _ in rows) / max(total, 1) for k in fns}


def predict(context: PyTorchTrialContext, model: Any, data: Any, *,
            batch_size: int | None = None) -> torch.Tensor:
    """``model``'s outputs for every sample of ``data`` (inputs, or (inputs, targets)), in
    the data's order, on every rank."""
    device = model_device(model, context.device)
    was_training = model.training
    model.eval()
    mine: list[torch.Tensor] = []
    try:
        with torch.no_grad():
            for batch in _batches(context, data, batch_size):
                batch = move_to(batch, device)
                x = batch[0] if isinstance(batch, (list, tuple)) else batch
                mine.append(model(x).cpu())
    finally:
        model.train(was_training)
    dist = context.distributed
    if dist.size == 1:
        return torch.cat(mine) if mine else torch.empty(0)
    # global batch k is every rank's k-th share, in rank order (det_sdk.pytorch._data)
    every: Sequence[list[torch.Tensor]] = dist.allgather(mine)
    parts = [shares[k] for k in range(max(len(s) for s in every))
             for shares in every if k < len(shares)]
    return torch.cat(parts) if parts else torch.empty(0)


def _numpy(outputs: Any) -> Any:
    """A model's outputs (a tensor, a list/tuple or a dict of them) as numpy arrays."""
    if isinstance(outputs, Mapping):
        return {k: _numpy(v) for k, v in outputs.items()}
    if isinstance(outputs, (list, tuple)):
        return type(outputs)(_numpy(v) for v in outputs)
    if isinstance(outputs, torch.Tensor):
        return outputs.detach().cpu().numpy()
    return np.asarray(outputs)


def _model_fingerprint(model: Any) -> dict[str, Any]:
    """The model's class and a digest of its state's values (parameters and buffers)."""
    h = xxhash.xxh3_64()
    for name, value in model.state_dict().items():
        a = np.ascontiguousarray(value.detach().cpu().numpy())
        h.update(f"{name}{a.dtype.str}{a.shape}".encode())
        h.update(a.view(np.uint8).reshape(-1).data)
    return {"class": type(model).__name__, "weights": h.hexdigest()}


def predict_to(context: PyTorchTrialContext, model: Any, data: Any,
               output: str | os.PathLike[str], *,
               batch_size: int | None = None) -> StreamedPredictions:
    """Stream ``model``'s outputs for ``data`` into part files in ``output`` (the format
    of det_sdk.predictions, as the Keras front writes it); a rerun into the same
    directory predicts only the batches without a complete part.

    Global batch ``k`` of ``per-slot batch size x processes`` samples is split among the
    processes as ``predict`` splits it; each process's share is one part, numbered in
    (batch, rank) order, so the parts in order are the samples in order.

    A stop asked by the master (a pause) is taken between batches, on every process
    after the same one (:class:`det_sdk.predictions.StopAsked`): the parts written are
    kept and the process exits 0, a stop that activate resumes from those parts.
    """
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(
            batch_size, int) or batch_size < 1):
        raise ArgumentTypeError(f"context.predict: batch_size must be a positive int, got "
                                f"{batch_size!r}")
    loader = wrap_data(context, data, batch_size=batch_size)
    dist = context.distributed
    core = context._core
    n, per_slot = len(loader.dataset), loader.batch_size
    # every process's share of every global batch, the empty ones left out: part i is
    # the i-th (batch, rank) share in order, the same numbering on every process
    shares = [list(ShardedBatches(n, per_slot, rank=r, size=dist.size, train=False))
              for r in range(dist.size)]
    order = [(r, idx) for k in range(max((len(s) for s in shares), default=0))
             for r, sh in enumerate(shares) if k < len(sh) and len(sh[k]) for idx in [sh[k]]]
    mine = {i: idx for i, (r, idx) in enumerate(order) if r == dist.rank}
    # every process walks as many steps as the process with the most shares has, its
    # j-th share at step j, so that all meet at the same steps (a stop asked)
    steps = max((sum(1 for r, _ in order if r == rank) for rank in range(dist.size)),
                default=0)
    first = _numpy(_inputs(loader.dataset[0])) if n and dist.is_chief else None
    fingerprint = {"kind": "torch-dataset", "rows": n, "batch_size": per_slot,
                   "processes": dist.size,
                   "digest": digest_arrays(_leaves(first)) if first is not None else None}
    store = open_store(dist, output_store(core, output), fingerprint,
                       _model_fingerprint(model))
    path = store.location
    done = store.complete_parts(mine)
    pending = [i for i in mine if i not in done]
    # only the batches not done are read (a batch sampler of their indices)
    batches = torch.utils.data.DataLoader(
        loader.dataset, batch_sampler=[mine[i] for i in pending],
        num_workers=loader.num_workers, collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory, **loader.kwargs)
    reported, failure, count = 0.0, None, len(done)
    asked, stopped, written = StopAsked(dist, core.preempt), False, 0
    device = model_device(model, context.device)
    was_training = model.training
    model.eval()
    writer = PartWriter(store)
    try:
        with torch.no_grad():
            it, parts = iter(batches), list(mine)
            for step in range(steps):
                if failure is None and step < len(parts) and parts[step] not in done:
                    try:
                        outputs = _numpy(model(_inputs(move_to(next(it), device))))
                        writer.put(parts[step], outputs)
                        count += 1
                        written += 1
                    except BaseException as err:
                        # walked on to the next meeting (no more batches), where every
                        # process learns of it and ends: their collectives stay paired
                        failure = err
                if dist.is_chief and time.monotonic() - reported >= 1.0:  # progress
                    reported = time.monotonic()
                    core.train.report_rows(min(n, count * per_slot * dist.size), n, str(path))
                if asked.after(step, failed=failure is not None):
                    stopped = True
                    break
    except BaseException as err:
        failure = failure or err
    finally:
        model.train(was_training)
    try:
        writer.close()
    except BaseException as err:
        failure = failure or err
    # every process ends here, failed, stopped or done, so that none waits on a dead one
    gathered = gather_failures(dist, store, failure, count, len(done))
    if stopped:  # asked by the master (a failure has been raised just above)
        _stop(context, path, min(n, sum(g[1] for g in gathered) * per_slot), n, written)
    resumed = sum(r[2] for r in gathered)
    rows = None
    if dist.is_chief:
        rows = store.finish(len(order))["rows"]
        core.train.report_rows(rows, rows, str(path))
    rows = dist.broadcast(rows)
    assert rows is not None  # the chief's count, on every process
    return StreamedPredictions(path=path, rows=rows, parts=len(order), resumed=resumed)


def _stop(context: PyTorchTrialContext, path: Path | str, rows: int, total: int,
          written: int) -> NoReturn:
    """The master asked the task to stop: every part written is complete (the writer has
    closed), which is the progress a run into the same output starts from; the process
    exits 0 (a stop the master resumes on activate, not the end), as the Keras front's."""
    dist, core = context.distributed, context._core
    if dist.is_chief:
        core.train.report_rows(rows, total, str(path))
        core.preempt.acknowledge_preemption_signal()
        print(f"det_sdk: stopped by the master after {rows} of {total} rows ({written} parts "
              f"written by this process) in {path}; activated, the job resumes from there",
              file=sys.stderr, flush=True)
    core.close()
    raise SystemExit(0)


def _inputs(batch: Any) -> Any:
    """A batch's inputs: the first of (inputs, targets), or the batch itself."""
    return batch[0] if isinstance(batch, (list, tuple)) else batch


def _leaves(outputs: Any) -> list[np.ndarray]:
    if isinstance(outputs, Mapping):
        return [np.asarray(v) for v in outputs.values()]
    if isinstance(outputs, (list, tuple)):
        return [np.asarray(v) for v in outputs]
    return [np.asarray(outputs)]


def load_checkpoint_model(context: PyTorchTrialContext, model: Any,
                          checkpoint_uuid: str | None = None, *,
                          trial_id: int | str | None = None, best: bool = False) -> Any:
    """Load a checkpoint's weights (its first model's) into ``model``; returns ``model``."""
    from det_sdk.pytorch._trainer import load_state

    if not isinstance(model, torch.nn.Module):
        raise ArgumentTypeError(f"load_checkpoint_model: model must be a torch.nn.Module, "
                                f"got {type(model).__name__}")
    if checkpoint_uuid is not None and (trial_id is not None or best):
        raise UsageError("load_checkpoint_model: give checkpoint_uuid, or trial_id / best, "
                         "not both")
    store = context._core.checkpoint
    uuid = checkpoint_uuid or store.select(trial_id, best=best)
    with store.restore_path(uuid) as path:
        state = load_state(path)
    models = state.get("models_state_dict") or []
    if not models:
        raise UsageError(f"load_checkpoint_model: checkpoint {uuid} holds no model")
    model.load_state_dict(models[0])
    return model


class PyTorchScriptContext(PyTorchTrialContext):
    """The context :func:`det_sdk.pytorch.init` returns: a :class:`PyTorchTrialContext` (what
    a Trial uses) with the script-style API of this module as its methods, parallel to
    ``det.keras.init()``'s.

    A subclass here rather than methods of PyTorchTrialContext: these run the Trainer,
    which imports _trial, so the Trial API cannot reach them without an import loop.
    """

    def wrap_data(self, data: Any, *, batch_size: int | None = None, shuffle: bool = False,
                  drop_last: bool = False, **kwargs: Any) -> Any:
        """``data`` (a Dataset, or a tuple of tensors / arrays) as a det_sdk DataLoader of
        per-slot batches, ordered from (seed, epoch) and sharded over the ranks.

        Example::

            train = context.wrap_data((x_train, y_train), shuffle=True)
        """
        return wrap_data(self, data, batch_size=batch_size, shuffle=shuffle,
                         drop_last=drop_last, **kwargs)

    def fit(self, model: Any, optimizer: Any, loss_fn: Callable[[Any, Any], Any],
            train_data: Any, *, validation_data: Any = None, epochs: int | None = None,
            max_length: Any = None, checkpoint_period: Any = None,
            validation_period: Any = None, metrics: Mapping[str, Any] | None = None,
            reporting_period: Any = None) -> dict[str, float]:
        """Train ``model`` in place with ``loss_fn(model(inputs), targets)`` on batches of
        ``(inputs, targets)``, on the same Trainer as a PyTorchTrial (exact resume,
        per-sample validation on N ranks, the searcher's length on the cluster). Returns
        the last validation metrics (``val_loss`` and ``val_<name>`` for each of ``metrics``).

        Example::

            with det_sdk.pytorch.init(hparams={"global_batch_size": 32}) as context:
                model = torch.nn.Linear(4, 1)
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                context.fit(model, opt, torch.nn.functional.mse_loss, (x, y),
                            validation_data=(x_val, y_val), epochs=2)
        """
        return fit(self, model, optimizer, loss_fn, train_data,
                   validation_data=validation_data, epochs=epochs,
                   max_length=max_length, checkpoint_period=checkpoint_period,
                   validation_period=validation_period, metrics=metrics,
                   reporting_period=reporting_period)

    def evaluate(self, model: Any, data: Any, *, loss_fn: Callable[[Any, Any], Any] | None = None,
                 metrics: Mapping[str, Any] | None = None) -> dict[str, float]:
        """Per-sample means of ``loss`` and ``metrics`` over all of ``data`` (every rank's
        share), the same on every rank.

        Example::

            context.evaluate(model, (x_val, y_val), loss_fn=F.mse_loss)  # {"loss": 0.03}
        """
        return evaluate(self, model, data, loss_fn=loss_fn, metrics=metrics)

    def predict(self, model: Any, data: Any, *, output: str | os.PathLike[str] | None = None,
                batch_size: int | None = None) -> Any:
        """``model``'s outputs for every sample of ``data``, in order, on every rank.

        ``output="DIR"`` streams them to part files in ``DIR`` instead (the format the Keras
        front writes, docs/batch-inference.md): a rerun into ``DIR`` predicts only what is
        missing; returns a ``StreamedPredictions``; read them with
        ``det_sdk.load_predictions(DIR)``. ``batch_size``: per slot (default: the
        hyperparameters' ``global_batch_size`` / processes).

        Example::

            outputs = context.predict(model, (x_test,))
            context.predict(model, (x_test,), output="predictions", batch_size=4096)
        """
        if output is not None:
            return predict_to(self, model, data, output, batch_size=batch_size)
        return predict(self, model, data, batch_size=batch_size)

    def load_checkpoint_model(self, model: Any, checkpoint_uuid: str | None = None, *,
                              trial_id: int | str | None = None, best: bool = False) -> Any:
        """Load a checkpoint's model weights into ``model`` (built by your code) and return
        it: ``checkpoint_uuid``'s, or a trial's latest (``best``: best by the searcher
        metric); this trial's by default.

        Example::

            model = context.load_checkpoint_model(Net(), best=True)
        """
        return load_checkpoint_model(self, model, checkpoint_uuid,
                                     trial_id=trial_id, best=best)
