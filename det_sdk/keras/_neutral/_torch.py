"""Keras 3 on PyTorch: each process steps on its rows; the optimizer averages gradients.

Keras has no distribution for PyTorch yet (keras-team/keras #21190). The processes meet in
``torch.distributed`` (``det_sdk.collectives.torch``: torchrun's or horovodrun's ranks,
Gloo on CPUs, NCCL on GPUs); Keras's PyTorch trainer computes each process's gradients
and calls ``optimizer.apply(grads, variables)``, where the optimizer
``context.wrap_optimizer`` marked sums them over the processes first, each process's
loss having been divided by their number (:func:`_combine_gradients`). Where every
process holds the same rows per step the sum is the gradient of the mean over the global
batch: one process's step, to float round-off. A last global batch the processes do not
divide is cut into parts one row apart; there each process's loss is weighted by its
share of the batch's rows instead (its rows over all of them), so that every row weighs
in the sum as in one process's mean, float16 loss scales included: that step too is one
process's.

Each process's metric states count its own rows: the engine sums them over the processes
before it reads them. Dropout draws per process: each process's random state has its
rank folded in, so the processes' masks differ as one process's do between rows.

>>> BACKEND.name, BACKEND.metrics_per_process, BACKEND.uneven_rows
('torch', True, True)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from det_sdk.distributed import Processes
from det_sdk.errors import UsageError
from det_sdk.keras._neutral._backend import Backend

__all__ = ["BACKEND", "TorchBackend"]

_WRAPPED = "_det_sdk_wrapped"  # wrap_optimizer saw it
_COMBINED = "_det_sdk_combined"  # its step combines the processes' gradients
_ROWS = "_det_sdk_rows"  # the StepRows its step reads


class StepRows:
    """This process's share of the rows of the step about to be trained, where the
    processes' shares differ (a last global batch they do not divide); else None."""

    def __init__(self) -> None:
        self.share: float | None = None

    def set(self, rows: int | None, rank: int, size: int) -> None:
        """The step's global batch holds ``rows`` rows, cut as ``_data`` cuts them (the
        first ``rows % size`` processes a row more).

        >>> s = StepRows(); s.set(11, 0, 2); s.share
        0.5454545454545454
        >>> s.set(11, 1, 2); s.share
        0.45454545454545453
        >>> s.set(16, 1, 2); s.share is None
        True
        """
        if rows is None or rows % size == 0:
            self.share = None
            return
        from det_sdk.keras._neutral._data import part_of

        self.share = part_of(rows, rank, size)[1] / rows


class TorchBackend(Backend):
    """Keras 3 on PyTorch (see the module)."""

    name = "torch"
    metrics_per_process = True
    updates_in_place = True
    uneven_rows = True

    def process_group(self) -> Processes:
        from det_sdk.collectives.torch import TorchDistributed

        return TorchDistributed.from_env()

    def set_seeds(self, seed: int) -> None:
        import torch

        super().set_seeds(seed)
        torch.manual_seed(seed)

    def wrap_optimizer(self, optimizer: Any, dist: Processes) -> Any:
        if dist.size > 1:
            setattr(optimizer, _WRAPPED, True)  # averaged once fit knows the model's
        return optimizer

    def check_optimizer(self, model: Any, dist: Processes) -> None:
        if dist.size == 1:
            return
        optimizer = getattr(model, "optimizer", None)
        inner = getattr(optimizer, "inner_optimizer", None)  # a LossScaleOptimizer's
        if not (getattr(optimizer, _WRAPPED, False) or getattr(inner, _WRAPPED, False)):
            raise UsageError(
                f"context.fit: {dist.size} processes on PyTorch need the model's optimizer "
                "wrapped, or each process would train its own rows alone: compile with "
                "optimizer=context.wrap_optimizer(keras.optimizers.Adam(...))")
        # the optimizer Keras's step calls (a LossScaleOptimizer compile made around the
        # wrapped one: the sum must come before its check for inf/nan gradients, or one
        # process would skip a step another takes)
        _combine_gradients(optimizer, dist.size)

    def step_rows(self, model: Any, dist: Processes, rows: int | None) -> None:
        step: StepRows | None = getattr(model.optimizer, _ROWS, None)
        if step is not None:
            step.set(rows, dist.rank, dist.size)

    def seed_rank(self, model: Any, dist: Processes) -> None:
        if dist.size == 1:
            return
        import torch

        torch.manual_seed(int(torch.initial_seed()) + dist.rank * 1_000_003)
        for layer in model._flatten_layers(include_self=True):
            for gen in getattr(layer, "_seed_generators", []):
                state = np.asarray(gen.state.numpy())
                gen.state.assign((state + np.array([dist.rank * 1_000_003, 0],
                                                   dtype=state.dtype)).astype(state.dtype))

    def random_state(self) -> list[Any]:
        # Keras's Dropout without a seed draws from torch's global generator, not from
        # its SeedGenerator (keras/src/backend/torch/random.py): it is the run's state too
        import torch

        return [torch.get_rng_state().numpy().copy()]

    def set_random_state(self, arrays: list[Any]) -> None:
        import torch

        if arrays:
            torch.set_rng_state(torch.from_numpy(np.array(arrays[0], dtype=np.uint8)))

    def determinism(self) -> str | None:
        import torch

        if torch.cuda.is_available():
            return ("det_sdk: PyTorch on GPUs: a resumed run repeats an uninterrupted one bit "
                    "for bit only with deterministic kernels: "
                    "torch.use_deterministic_algorithms(True) and "
                    "CUBLAS_WORKSPACE_CONFIG=:4096:8")
        return None


def _combine_gradients(optimizer: Any, size: int) -> None:
    """Make ``optimizer`` apply one process's step of the global batch.

    Keras's PyTorch step calls ``optimizer.scale_loss(loss)`` before ``backward``: there
    each process's loss (a mean over its rows) is divided by the number of processes, so
    its gradients are its share of the global mean's, and ``apply`` sums them over the
    processes (one ``all_reduce`` of every gradient in one flat buffer). Under a loss scale
    (``mixed_float16``) each row's float16 gradient is then what one process computes,
    and every process sees the same sum when the optimizer checks it for overflow. A step
    that never called ``scale_loss`` (a custom ``train_step``) has its gradients averaged.
    With a power of two processes the division is exact.

    In a step whose processes hold different rows (:class:`StepRows`) each process's
    loss is multiplied by its share of the rows instead of divided by their number (or,
    without ``scale_loss``, its gradients by its share times their number, before the
    average): every row then weighs 1/rows, as in one process's mean.
    """
    import torch
    import torch.distributed as tdist

    if getattr(optimizer, _COMBINED, False):
        return
    scale_loss, apply = optimizer.scale_loss, optimizer.apply
    rows = StepRows()
    divided = [False]  # scale_loss ran for the step being applied

    def shared_scale_loss(loss: Any) -> Any:
        divided[0] = True
        share = rows.share
        return scale_loss(loss) / size if share is None else scale_loss(loss) * share

    def combined_apply(grads: Any, trainable_variables: Any = None) -> Any:
        grads = list(grads)
        present = [i for i, g in enumerate(grads) if g is not None]
        if present:
            flat = torch.cat([grads[i].reshape(-1) for i in present])
            if not divided[0] and rows.share is not None:
                flat *= rows.share * size
            tdist.all_reduce(flat)  # a sum; bounded by the group's timeout
            if not divided[0]:
                flat /= size
            offset = 0
            for i in present:
                n = grads[i].numel()
                grads[i] = flat[offset:offset + n].view_as(grads[i])
                offset += n
        divided[0] = False
        return apply(grads, trainable_variables)

    optimizer.scale_loss, optimizer.apply = shared_scale_loss, combined_apply
    setattr(optimizer, _ROWS, rows)
    setattr(optimizer, _COMBINED, True)


BACKEND = TorchBackend()
