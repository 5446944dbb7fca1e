"""``Trainer(trial, context).fit()``: the training loop (the context is
``det_sdk.pytorch.init()``'s, :mod:`._init`).

Exact by construction:

- the data order is a function of (trial seed, epoch) only (:mod:`._data`);
- a checkpoint holds the models, optimizers, schedulers, callbacks, the position
  (batches trained) and every rank's RNG states (torch, numpy, python, CUDA), all as
  tensors: ``torch.load(path, weights_only=True)`` reads it;
- a resume restores all of it and skips exactly the batches done in the epoch;
- validation metrics are per-sample means: each rank sums ``metric x batch length``
  and counts samples, the sums and counts are reduced over the ranks.

Checkpoints go through ``det.core``'s ``checkpoint.store_path`` (the local run's
directory or the master's storage) in the background writer of
:mod:`det_sdk.engine.writer`; a stop (pause, preemption, SIGTERM) waits for it.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import logging
import os
import random
import time
import uuid as uuidlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from det_sdk.engine.signals import catch_stop_signals
from det_sdk.engine.stopping import STOP_REQUESTED, StopAgreement
from det_sdk.engine.writer import CheckpointWriter
from det_sdk.errors import DetSdkError
from det_sdk.pytorch._data import DataLoader
from det_sdk.pytorch._trial import (
    Batch,
    Epoch,
    LRScheduler,
    PyTorchCallback,
    PyTorchTrial,
    PyTorchTrialContext,
)
from det_sdk.storage import folder_size

__all__ = ["Trainer"]

log = logging.getLogger("det_sdk.pytorch")

STATE_FILE = "state_dict.pth"
#: on N ranks, about how many seconds of training pass between the ranks' agreement on
#: stopping (preemption, SIGTERM); one process checks every batch
STOP_CHECK_S = 0.2


class TrainerError(DetSdkError, ValueError):
    """The trial or the arguments of fit() cannot be trained as given."""


def _distributed() -> Any:
    from det_sdk.collectives.torch import TorchDistributed, launched_by_torch_or_horovod
    from det_sdk.distributed import SingleProcess

    if launched_by_torch_or_horovod():
        return TorchDistributed.from_env()
    return SingleProcess()


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


# --- RNG state as tensors (weights_only=True loads them) ------------------------------------

def _rng_state() -> dict[str, torch.Tensor]:
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    assert kind == "MT19937"
    py = random.getstate()
    out = {
        "torch": torch.get_rng_state(),
        "numpy_keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
        "numpy_pos": torch.tensor([pos, has_gauss], dtype=torch.int64),
        "numpy_gauss": torch.tensor([gauss], dtype=torch.float64),
        "python": torch.tensor(list(py[1]), dtype=torch.int64),
        "python_version": torch.tensor([py[0]], dtype=torch.int64),
    }
    if torch.cuda.is_available():
        out["cuda"] = torch.cuda.get_rng_state()
    return out


def _set_rng_state(state: Mapping[str, torch.Tensor]) -> None:
    torch.set_rng_state(state["torch"])
    pos, has_gauss = (int(v) for v in state["numpy_pos"].tolist())
    np.random.set_state(("MT19937", state["numpy_keys"].numpy().astype(np.uint32), pos,
                         has_gauss, float(state["numpy_gauss"][0])))
    py_gauss = None
    random.setstate((int(state["python_version"][0]),
                     tuple(int(v) for v in state["python"].tolist()), py_gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def _clone(obj: Any) -> Any:
    """A copy of a state dict whose tensors no longer change with training (the snapshot)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone().cpu()
    if isinstance(obj, dict):
        return {k: _clone(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_clone(v) for v in obj)
    return obj


def _unwrap(model: Any) -> Any:
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def _sha256(path: os.PathLike[str] | str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _trial_spec(trial: Any) -> str:
    """``module:QualName`` of the trial's class (``__main__`` when defined in the script)."""
    cls = type(trial)
    return f"{cls.__module__}:{cls.__qualname__}"


def _jsonable(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON-representable part of ``obj`` (hyperparameters are, from configs)."""
    try:
        return json.loads(json.dumps(dict(obj)))
    except (TypeError, ValueError):
        return {k: v for k, v in obj.items() if isinstance(v, (str, int, float, bool))}


def load_state(path: os.PathLike[str] | str) -> dict[str, Any]:
    """A checkpoint directory's state (``weights_only=True``), its checksum verified."""
    from pathlib import Path

    p = Path(path)
    meta_file = p / "metadata.json"
    if meta_file.is_file():
        want = (json.loads(meta_file.read_text()).get("checksums") or {}).get(STATE_FILE)
        if want and _sha256(p / STATE_FILE) != want:
            raise TrainerError(f"checkpoint {p}: {STATE_FILE} does not match its sha256 in "
                               f"metadata.json (a damaged or partial copy)")
    return torch.load(p / STATE_FILE, weights_only=True, map_location="cpu")


class _SeedShape:
    """The seed tutorial's interface: build_model / optimizer / train_batch(..., model, ...)."""

    @staticmethod
    def applies(trial: Any) -> bool:
        return callable(getattr(trial, "build_model", None)) and callable(
            getattr(trial, "optimizer", None))


class Trainer:
    """Trains a :class:`PyTorchTrial` with its context (Determined 0.38's ``Trainer``)."""

    # when the ranks next agree on a stop, and the batch time since the last check
    # (_stop_requested; set before the first batch of each fit)
    _next_check: int
    _check_n: int
    _check_time: float

    def __init__(self, trial: Any, context: PyTorchTrialContext) -> None:
        if not isinstance(context, PyTorchTrialContext):
            raise TrainerError(f"Trainer: context must be det_sdk.pytorch's "
                               f"PyTorchTrialContext, got {type(context).__name__}")
        self.trial, self.context = trial, context
        self.core = context._core
        self.dist = context.distributed
        self.writer = CheckpointWriter()
        self._seed_shape = _SeedShape.applies(trial)
        if self._seed_shape and not context.models:
            model = context.wrap_model(trial.build_model())
            context.wrap_optimizer(trial.optimizer(model))
        self.callbacks: dict[str, PyTorchCallback] = dict(trial.build_callbacks()) \
            if hasattr(trial, "build_callbacks") else {}
        self.batches_trained = 0
        self._stop_signal: Any = lambda: None  # catch_stop_signals' during fit
        self._stop_agreement = StopAgreement(self.dist, self.core.preempt,
                                             self._local_stop_reason, acknowledge=True)
        self._train_loader = self._checked_loader(trial.build_training_data_loader(),
                                                  "build_training_data_loader")
        # no validation data (context.fit without validation_data): nothing to validate
        val = trial.build_validation_data_loader()
        self._val_loader = None if val is None else self._checked_loader(
            val, "build_validation_data_loader")
        #: the metrics of the last validation ({} before the first)
        self.last_validation: dict[str, Any] = {}
        # training metrics of batches not yet reported (a resumed checkpoint's)
        self._window: list[dict[str, float]] = []
        # global_batch_size is optional (Determined's Trainer scripts size their loaders
        # themselves): compare only when the trial declares one
        if "global_batch_size" in context.get_hparams() and \
                self._train_loader.batch_size != context.get_per_slot_batch_size():
            log.warning("det_sdk.pytorch: the training DataLoader's batch_size %d is not "
                        "context.get_per_slot_batch_size() (%d)", self._train_loader.batch_size,
                        context.get_per_slot_batch_size())

    @staticmethod
    def _checked_loader(loader: Any, where: str) -> DataLoader:
        if not isinstance(loader, DataLoader):
            raise TrainerError(f"{where}() must return det_sdk.pytorch.DataLoader (det_sdk "
                               f"orders the data to resume exactly), got {type(loader).__name__}")
        return loader

    # -- sizes
    @property
    def seed(self) -> int:
        return int(self.core.info.trial_seed)

    def batches_per_epoch(self) -> int:
        return len(self._train_loader.get_data_loader(rank=self.dist.rank, size=self.dist.size,
                                                      seed=self.seed).batch_sampler)

    def _in_batches(self, length: Any) -> int:
        """Batches of a Batch/Epoch or a searcher operation (``length``, ``unit``)."""
        value = int(length.length if hasattr(length, "length") else length.value)
        if getattr(length, "unit", None) == "epochs":
            return value * self.batches_per_epoch()
        return value

    # -- fit
    def fit(self, max_length: Batch | Epoch | None = None,
            checkpoint_period: Batch | Epoch | None = None,
            validation_period: Batch | Epoch | None = None,
            latest_checkpoint: str | None = None, reporting_period: Batch | None = None,
            **_: Any) -> None:
        """Train to ``max_length`` (the searcher's length on the cluster), validating every
        ``validation_period`` and checkpointing every ``checkpoint_period`` (and at the end);
        resume from ``latest_checkpoint`` (default: the trial's, from the master or
        ``DET_RESUME``)."""
        for name, val in (("max_length", max_length), ("checkpoint_period", checkpoint_period),
                          ("validation_period", validation_period),
                          ("reporting_period", reporting_period)):
            if val is not None and not isinstance(val, Batch):
                raise TrainerError(f"fit: {name} must be det_sdk.pytorch.Batch(n) or "
                                   f"Epoch(n), got {val!r}")
        reporting_period = reporting_period if reporting_period is not None else Batch(100)
        # on the cluster the searcher's length; off it max_length, else the config's
        on_cluster = bool(self.core.info.master_url)
        told = self.core.searcher.current_length() if on_cluster or max_length is None \
            else None
        if told is None and max_length is None:
            raise TrainerError("fit: max_length is required off the cluster when the config "
                               "has no searcher.max_length (e.g. max_length=Epoch(1))")
        uuid = latest_checkpoint or self.core.info.latest_checkpoint
        if uuid:
            self._restore(uuid)
        signals = contextlib.ExitStack()
        # SIGTERM and Ctrl-C: a checkpoint after this batch, then a clean stop (as in Keras)
        self._stop_signal = signals.enter_context(catch_stop_signals())
        try:
            for cb in self.callbacks.values():
                cb.on_training_start()
            if told is not None:
                for op in self.core.searcher.operations():
                    stopped, metric = self._train_to(self._in_batches(op), op, checkpoint_period,
                                                     validation_period, reporting_period)
                    if stopped:
                        return
                    op.report_completed(metric)
            else:
                assert max_length is not None
                self._train_to(self._in_batches(max_length), None, checkpoint_period,
                               validation_period, reporting_period)
        finally:
            self.writer.wait()
            signals.close()
            self._stop_signal = lambda: None
            for cb in self.callbacks.values():
                cb.on_trial_shutdown()

    def _should_stop(self, n: int) -> str | None:
        """Why every rank stops after batch ``n`` (the same on each), None: train on
        (:class:`StopAgreement`: SIGTERM or set_stop_requested on any rank, the master's
        request, acknowledged when seen).

        One process decides every batch. N ranks agree through a collective, which
        costs about 1 ms (10% of a small model's step on 2 shared cores): asked at the
        same batches on every rank, spaced to about STOP_CHECK_S of training by the
        slowest rank's batch time (carried by the agreement, so every rank computes the
        same next batch).
        """
        if self.dist.size == 1:
            return self._stop_agreement.decide()
        if n < self._next_check:
            return None
        now = time.perf_counter()
        per_batch = (now - self._check_time) / max(1, n - self._check_n)
        self._check_time, self._check_n = now, n
        reason = self._stop_agreement.decide(carry=per_batch)
        slowest = max(self._stop_agreement.carried)
        self._next_check = n + max(1, min(100, int(STOP_CHECK_S / max(slowest, 1e-6))))
        return reason

    def _local_stop_reason(self) -> str | None:
        """Why this rank asks to stop: a signal it received, set_stop_requested."""
        return self._stop_signal() or (STOP_REQUESTED if self.context.get_stop_requested()
                                       else None)

    def _train_to(self, target: int, op: Any, ckpt_period: Batch | None,
                  val_period: Batch | None, rep_period: Batch) -> tuple[bool, float]:
        """Train until ``target`` batches; (stopped early, searcher metric)."""
        per_epoch = self.batches_per_epoch()
        if per_epoch < 1:
            raise TrainerError("fit: the training data has no full batch for "
                               f"{self.dist.size} rank(s)")
        every = {k: (self._in_batches(p) if p is not None else 0)
                 for k, p in (("ckpt", ckpt_period), ("val", val_period), ("rep", rep_period))}
        metric_name, _smaller = self.core.searcher_metric
        self._next_check = self._check_n = self.batches_trained + 1
        self._check_time = time.perf_counter()
        last_val: dict[str, Any] = {}
        last_ckpt, last_val_at = -1, -1
        # a resumed run continues the reporting window its checkpoint stopped in: the
        # master's training metrics then average what an uninterrupted run's do
        window, self._window = self._window, []
        for model in self.context.models:
            model.train()
        # the profiler's per-batch timings (det_sdk.profiler): data wait, step
        timer = self.core.batch_timer
        if timer is not None and timer.sync_timings and torch.cuda.is_available():
            timer.sync = torch.cuda.synchronize  # a step's time is its GPU work's
        while self.batches_trained < target:
            epoch, start = divmod(self.batches_trained, per_epoch)
            if start == 0:
                for cb in self.callbacks.values():
                    cb.on_training_epoch_start(epoch)
            loader = self._train_loader.get_data_loader(
                seed=self.seed, epoch=epoch, rank=self.dist.rank, size=self.dist.size,
                skip=start)
            stopped = False
            if timer is not None:
                timer.batch_start()
            for i, batch in enumerate(loader, start=start):
                if timer is not None:
                    timer.data_ready()
                self.context._batch_in_epoch = i
                self.context._epoch_end = i == per_epoch - 1
                window.append(self._train_batch(self.context.to_device(batch), epoch, i))
                if timer is not None:
                    timer.step_end()
                self.batches_trained += 1
                n = self.batches_trained
                if every["rep"] and n % every["rep"] == 0:
                    self._report_training(window, epoch)
                    window = []
                if op is not None:
                    op.report_progress(n if op.unit == "batches" else n / per_epoch)
                if every["val"] and n % every["val"] == 0:
                    last_val, last_val_at = self._validate(epoch), n
                if every["ckpt"] and n % every["ckpt"] == 0:
                    self._checkpoint(epoch, last_val, window)
                    last_ckpt = n
                reason = self._should_stop(n)
                if reason or n >= target:
                    stopped = bool(reason) and n < target
                    break
                if timer is not None:  # the next batch's data is asked for now
                    timer.batch_start()
            if self.batches_trained % per_epoch == 0:
                for s in self.context.lr_schedulers:
                    if s.step_mode == LRScheduler.StepMode.STEP_EVERY_EPOCH and \
                            (self.batches_trained // per_epoch) % s.frequency == 0:
                        s.step()
                for cb in self.callbacks.values():
                    cb.on_training_epoch_end(epoch)
            if stopped:
                # the window is not reported here but saved with the checkpoint: the
                # resumed run reports it whole, at the step an uninterrupted run does
                if last_ckpt != self.batches_trained:
                    self._checkpoint(epoch, last_val, window)
                self.writer.wait()
                if self._stop_signal():  # the user (or a scheduler) sent it: say so
                    log.warning("det_sdk.pytorch: %s: stopped at batch %d, checkpointed",
                                self._stop_signal(), self.batches_trained)
                else:
                    log.info("det_sdk.pytorch: stopped at batch %d (checkpointed)",
                             self.batches_trained)
                return True, float("nan")
        epoch = max(0, (self.batches_trained - 1) // per_epoch)
        if window:
            self._report_training(window, epoch)
        if last_val_at != self.batches_trained:
            last_val = self._validate(epoch)
        if last_ckpt != self.batches_trained:
            self._checkpoint(epoch, last_val, [])
        self.writer.wait()
        if metric_name not in last_val:
            if op is not None:
                raise TrainerError(f"fit: the searcher's metric {metric_name!r} is not among "
                                   f"the validation metrics {sorted(last_val)}")
            return False, float("nan")
        return False, float(last_val[metric_name])

    def _train_batch(self, batch: Any, epoch: int, idx: int) -> dict[str, float]:
        ctx = self.context
        if self._seed_shape:
            out = self.trial.train_batch(batch, ctx.models[0], epoch, idx)
            if not isinstance(out, Mapping) or "loss" not in out:
                raise TrainerError("train_batch must return a dict with 'loss' (the tutorial's "
                                   f"interface), got {type(out).__name__}")
            ctx.backward(out["loss"])
            for opt in ctx.optimizers:
                ctx.step_optimizer(opt)
        else:
            out = self.trial.train_batch(batch, epoch, idx)
            if isinstance(out, torch.Tensor):
                out = {"loss": out}
            if not isinstance(out, Mapping):
                raise TrainerError(f"train_batch must return a dict of metrics or a loss "
                                   f"tensor, got {type(out).__name__}")
        for s in ctx.lr_schedulers:
            every_batch = s.step_mode == LRScheduler.StepMode.STEP_EVERY_BATCH
            if every_batch and (idx + 1) % s.frequency == 0:
                s.step()
        for scaler in ctx._stepped_scalers:  # once a batch, after every optimizer's step
            scaler.update()
        ctx._stepped_scalers.clear()
        return {k: float(v.detach().item() if isinstance(v, torch.Tensor) else v)
                for k, v in out.items()}

    def _report_training(self, window: list[dict[str, float]], epoch: int) -> None:
        sums: dict[str, float] = {}
        for row in window:
            for k, v in row.items():
                sums[k] = sums.get(k, 0.0) + v
        mine = (sums, len(window))
        rows = self.dist.allgather(mine) if self.dist.size > 1 else [mine]
        total = sum(n for _, n in rows)
        metrics = {k: sum(s.get(k, 0.0) for s, _ in rows) / total for k in sums}
        self.core.train.report_training_metrics(steps_completed=self.batches_trained,
                                                metrics=metrics, epoch=epoch)
        for cb in self.callbacks.values():
            cb.on_training_workload_end(metrics, window)

    # -- validation: per-sample means over every rank's data
    def _validate(self, epoch: int) -> dict[str, Any]:
        if self._val_loader is None:
            return {}
        ctx = self.context
        for cb in self.callbacks.values():
            cb.on_validation_start()
        for model in ctx.models:
            model.eval()
        for r in ctx.reducers.values():
            r.reset()
        sums: dict[str, float] = {}
        count = 0
        with torch.no_grad():
            if hasattr(self.trial, "evaluate_full_dataset") and not hasattr(
                    self.trial, "evaluate_batch"):
                full = self._val_loader.get_data_loader(train=False)
                metrics = dict(self.trial.evaluate_full_dataset(full)) \
                    if self.dist.is_chief else {}
                metrics = self.dist.broadcast(metrics) if self.dist.size > 1 else metrics
            else:
                loader = self._val_loader.get_data_loader(rank=self.dist.rank,
                                                          size=self.dist.size, train=False)
                takes_model = "model" in inspect.signature(self.trial.evaluate_batch).parameters
                for i, batch in enumerate(loader):
                    batch = ctx.to_device(batch)
                    n = self.trial.get_batch_length(batch) if hasattr(
                        self.trial, "get_batch_length") else PyTorchTrial.get_batch_length(
                        self.trial, batch)
                    if takes_model:
                        out = self.trial.evaluate_batch(batch, ctx.models[0])
                    else:
                        out = self.trial.evaluate_batch(batch, i)
                    for k, v in (out or {}).items():
                        v = float(v.item() if isinstance(v, torch.Tensor) else v)
                        sums[k] = sums.get(k, 0.0) + v * n
                    count += n
                per_slot = {name: r.per_slot_reduce() for name, r in ctx.reducers.items()}
                rows = self.dist.allgather((sums, count, per_slot)) if self.dist.size > 1 \
                    else [(sums, count, per_slot)]
                total = sum(c for _, c, _ in rows)
                metrics = {k: sum(s.get(k, 0.0) for s, _, _ in rows) / max(total, 1)
                           for k in sums}
                for name, r in ctx.reducers.items():
                    metrics[name] = r.cross_slot_reduce([p[name] for _, _, p in rows])
        for model in ctx.models:
            model.train()
        metrics = {k: (float(v) if isinstance(v, (int, float, np.floating, torch.Tensor)) else v)
                   for k, v in metrics.items()}
        self.core.train.report_validation_metrics(steps_completed=self.batches_trained,
                                                  metrics=metrics, epoch=epoch)
        for cb in self.callbacks.values():
            cb.on_validation_end(metrics)
        self.last_validation = metrics
        return metrics

    # -- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The training state as Determined names it, tensors only (this rank's RNG)."""
        ctx = self.context
        return {
            "models_state_dict": [_unwrap(m).state_dict() for m in ctx.models],
            "optimizers_state_dict": [o.state_dict() for o in ctx.optimizers],
            "lr_schedulers_state_dict": [s.state_dict() for s in ctx.lr_schedulers],
            "scalers_state_dict": [s.state_dict() for s in ctx.scalers],
            "callbacks": {k: cb.state_dict() for k, cb in self.callbacks.items()},
            "trainer_state": {"batches_trained": torch.tensor(self.batches_trained),
                              "ranks": torch.tensor(self.dist.size)},
        }

    def _checkpoint(self, epoch: int, metrics: Mapping[str, Any],
                    window: list[dict[str, float]]) -> None:
        """Checkpoint now; ``window``: this rank's training metrics not yet reported.
        The time training waits for it goes to the profiler (det_sdk.profiler)."""
        began = time.perf_counter()
        try:
            self._checkpoint_now(epoch, metrics, window)
        finally:
            timer = self.core.batch_timer
            if timer is not None:
                timer.checkpoint_blocked(time.perf_counter() - began)

    def _checkpoint_now(self, epoch: int, metrics: Mapping[str, Any],
                        window: list[dict[str, float]]) -> None:
        mine = (_rng_state(), list(window))
        every = self.dist.allgather(mine) if self.dist.size > 1 else [mine]
        if not self.dist.is_chief:
            return
        state = self.state_dict()
        state["rng_state"] = {f"rank{r}": s for r, (s, _) in enumerate(every)}
        state["trainer_state"]["windows"] = {f"rank{r}": w for r, (_, w) in enumerate(every)}
        for cb in self.callbacks.values():
            cb.on_checkpoint_save_start(state)
        snap = _clone(state)  # now, on the training thread; written in the background
        metadata = {"steps_completed": self.batches_trained, "epoch": epoch,
                    "batch": self.batches_trained, "framework": f"torch-{torch.__version__}",
                    "format": "det_sdk.pytorch", "ranks": self.dist.size,
                    "metrics": {k: v for k, v in metrics.items()
                                if isinstance(v, (int, float))}, "created": time.time(),
                    # what load_trial_from_checkpoint_path needs to rebuild the trial
                    "trial_cls_spec": _trial_spec(self.trial),
                    "hparams": _jsonable(self.context.get_hparams())}
        store = self.core.checkpoint

        def fill(path: Path) -> dict[str, Any]:
            torch.save(snap, path / STATE_FILE)
            meta = {**metadata, "checksums": {STATE_FILE: _sha256(path / STATE_FILE)}}
            (path / "metadata.json").write_text(json.dumps(meta))
            return {"steps_completed": metadata["steps_completed"], "epoch": epoch,
                    "batch": metadata["batch"], "size": folder_size(path),
                    "metrics": dict(metadata["metrics"])}

        def write() -> Callable[[], None]:  # the publish: after the snapshot is dropped
            return store.write_staged(str(uuidlib.uuid4()), fill)

        self.writer.submit(write)

    def _restore(self, uuid: str) -> None:
        with self.core.checkpoint.restore_path(uuid) as path:
            state = load_state(path)
        ctx = self.context
        saved_ranks = int(state["trainer_state"]["ranks"])
        for cb in self.callbacks.values():
            cb.on_checkpoint_load_start(state)
        for m, s in zip(ctx.models, state["models_state_dict"]):
            _unwrap(m).load_state_dict(s)
        for o, s in zip(ctx.optimizers, state["optimizers_state_dict"]):
            o.load_state_dict(s)
        for sch, s in zip(ctx.lr_schedulers, state["lr_schedulers_state_dict"]):
            sch.load_state_dict(s)
        for scaler, s in zip(ctx.scalers, state.get("scalers_state_dict", [])):
            scaler.load_state_dict(s)
        for k, cb in self.callbacks.items():
            if k in state.get("callbacks", {}):
                cb.load_state_dict(state["callbacks"][k])
        self.batches_trained = int(state["trainer_state"]["batches_trained"])
        key = f"rank{self.dist.rank}"
        windows = state["trainer_state"].get("windows", {})
        if saved_ranks == self.dist.size:
            self._window = list(windows.get(key, []))
        elif self.dist.is_chief:  # another number of ranks: the report sums every row
            self._window = [row for w in windows.values() for row in w]
        if saved_ranks == self.dist.size and key in state["rng_state"]:
            _set_rng_state(state["rng_state"][key])
        else:
            log.warning("det_sdk.pytorch: checkpoint %s was written by %d rank(s), this run "
                        "has %d: RNG states are reseeded (data order is still exact)",
                        uuid, saved_ranks, self.dist.size)
            _seed_everything(self.seed + self.batches_trained + self.dist.rank)
        log.info("det_sdk.pytorch: resumed from %s at batch %d", uuid, self.batches_trained)

