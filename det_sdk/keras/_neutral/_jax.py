"""Keras 3 on JAX: N processes as one program over the global batch.

``jax.distributed`` joins the processes (``det_sdk.collectives.jax``: under torchrun or
horovodrun, Gloo between CPUs, NCCL between GPUs), and Keras's ``DataParallel``
distribution spreads every variable over all of them: each process hands its rows of a
global batch to the step, which Keras assembles into one global array
(``jax.make_array_from_process_local_data``), so the loss, its gradient, the metrics and
dropout's masks are those of one process on the whole batch. No gradient is averaged by
hand; the collectives are XLA's, inside the compiled step.

>>> BACKEND.name, BACKEND.metrics_per_process
('jax', False)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from det_sdk.distributed import Processes
from det_sdk.keras._neutral._backend import Backend

__all__ = ["BACKEND", "JaxBackend"]


class JaxBackend(Backend):
    """Keras 3 on JAX (see the module)."""

    name = "jax"
    metrics_per_process = False

    def process_group(self) -> Processes:
        from det_sdk.collectives.jax import JaxDistributed

        return JaxDistributed.from_env()

    def prepare(self, dist: Processes) -> None:
        if dist.size == 1:
            return
        import jax
        import keras

        # the data is this process's rows already (det_sdk shards each global batch)
        keras.distribution.set_distribution(keras.distribution.DataParallel(
            devices=jax.devices(), auto_shard_dataset=False))

    def predict(self, model: Any, x: Any, dist: Processes, **kwargs: Any) -> Any:
        with self.local_model(model, dist) as local:
            return local.predict(x, **kwargs)

    @contextlib.contextmanager
    def local_model(self, model: Any, dist: Processes) -> Iterator[Any]:
        if dist.size == 1:
            yield model
            return
        # Under DataParallel a prediction is a global array no process may read whole
        # (and one step of all processes): each predicts with a copy of the model of its
        # own (the weights are replicated, so each holds them all), no distribution set.
        import keras

        from det_sdk.keras._neutral._state import tensorflow_absent

        distribution = keras.distribution.distribution()
        keras.distribution.set_distribution(None)
        try:
            with tensorflow_absent():  # cloning serializes the model
                local = keras.models.clone_model(model)
            local.set_weights(model.get_weights())
            yield local
        finally:
            keras.distribution.set_distribution(distribution)

    def sync(self, model: Any) -> None:
        # During an epoch JAX's trainer keeps the state in its own arrays
        model.jax_state_sync()

    def determinism(self) -> str | None:
        # XLA on CPUs repeats its reductions; on GPUs a few kernels (scatter-adds) may not
        import jax

        if any(d.platform == "gpu" for d in jax.devices()):
            return ("det_sdk: JAX on GPUs: a resumed run repeats an uninterrupted one bit for "
                    "bit only with XLA_FLAGS=--xla_gpu_deterministic_ops=true (set it before "
                    "python starts)")
        return None


BACKEND = JaxBackend()
