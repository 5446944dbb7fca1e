"""The backend seam of the JAX and PyTorch engine: chosen once, in ``init()``.

What differs between Keras 3 on JAX and on PyTorch is here, one class each
(``_jax.JaxBackend``, ``_torch.TorchBackend``), and nowhere else in ``_neutral``:

- how the processes meet (JAX: ``jax.distributed``; PyTorch: ``torch.distributed``);
- how a step sees every process's rows: on JAX, Keras's ``DataParallel`` distribution
  makes each step one program over the global batch (the gradient, the metrics and the
  dropout masks are one process's); on PyTorch each process steps on its rows and the
  optimizer averages the gradients before it applies them;
- whether the metrics a process holds are its own rows' (PyTorch) or every row's (JAX);
- reading the live variables in a callback (JAX keeps them out of the model during an
  epoch), and random state kept outside them (PyTorch's global generator).

>>> backend_named("jax").name
'jax'
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any

from det_sdk.distributed import Processes, SingleProcess
from det_sdk.errors import UsageError
from det_sdk.ranks import horovodrun, torchrun

__all__ = ["BACKENDS", "Backend", "backend_named"]

#: The backends this engine trains on, and the module of each.
BACKENDS = {"jax": "det_sdk.keras._neutral._jax", "torch": "det_sdk.keras._neutral._torch"}


class Backend:
    """What the engine asks of a backend. One process needs nothing of it but its name."""

    name = ""
    #: True when each process's metric states hold its own rows only (summed over the
    #: processes before they are read); False when every process holds every row's.
    metrics_per_process = False
    #: True when training updates the variables' buffers in place (PyTorch): a checkpoint
    #: written in the background copies them first; JAX makes new arrays each step
    updates_in_place = False
    #: True when the processes of a step may hold different numbers of rows (PyTorch:
    #: each process's loss is weighted by its share of the step's rows, so a last global
    #: batch N does not divide trains as on one process); False when a step is one program
    #: over equal parts of the global batch (JAX), where such a batch is refused
    uneven_rows = False

    def processes(self) -> Processes:
        """The processes of this run, from the launcher's environment (one: ``SingleProcess``)."""
        if not (torchrun.launched() or horovodrun.launched()):
            return SingleProcess()
        return self.process_group()

    def process_group(self) -> Processes:
        """The backend's process group of the ranks a launcher (torchrun, horovodrun) started."""
        raise NotImplementedError

    def predict(self, model: Any, x: Any, dist: Processes, **kwargs: Any) -> Any:
        """``model.predict(x)`` of every row of ``x``, on this process."""
        return model.predict(x, **kwargs)

    @contextlib.contextmanager
    def local_model(self, model: Any, dist: Processes) -> Iterator[Any]:
        """A model that predicts on this process alone (the same weights), while the
        context lasts: ``model`` itself, unless the backend makes a step one program of
        every process (JAX)."""
        yield model

    def set_seeds(self, seed: int) -> None:
        """Seed Python, NumPy and Keras's global ``SeedGenerator`` (``keras.random`` draws
        without a seed) as ``keras.utils.set_random_seed`` does, without importing
        TensorFlow (that function seeds it too when it is installed: seconds of start-up
        and a framework the run does not use)."""
        import random

        import numpy as np
        from keras.src.backend.common import global_state
        from keras.src.random import seed_generator
        from keras.src.utils import rng_utils

        global_state.set_global_attribute(rng_utils.GLOBAL_RANDOM_SEED, seed)
        global_state.set_global_attribute(seed_generator.GLOBAL_SEED_GENERATOR, None)
        random.seed(seed)
        np.random.seed(seed)

    def prepare(self, dist: Processes) -> None:
        """Before the script builds its model: how the processes share a step."""

    def wrap_optimizer(self, optimizer: Any, dist: Processes) -> Any:
        """``optimizer``, made to apply what one process would apply on ``dist``."""
        return optimizer

    def check_optimizer(self, model: Any, dist: Processes) -> None:
        """Before the first step: refuse an optimizer that would train N processes wrong."""

    def step_rows(self, model: Any, dist: Processes, rows: int | None) -> None:
        """Before each step: the rows of its global batch, over every process (None: not
        known, a PyDataset's, whose batches are always cut equally)."""

    def sync(self, model: Any) -> None:
        """Put the training step's current values into the model's variables."""

    def seed_rank(self, model: Any, dist: Processes) -> None:
        """Give each process its own random draws where its step draws for its rows only."""

    def random_state(self) -> list[Any]:
        """This process's random state outside the model's ``SeedGenerator`` objects, as
        numpy arrays (checkpointed per process)."""
        return []

    def set_random_state(self, arrays: list[Any]) -> None:
        """Restore what :meth:`random_state` returned."""

    def determinism(self) -> str | None:
        """A warning when a step may not repeat bit for bit, naming the switch; None if it does."""
        return None


def backend_named(name: str) -> Backend:
    """The backend Keras runs on (``keras.config.backend()``), other than TensorFlow."""
    module = BACKENDS.get(name)
    if module is None:
        raise UsageError(
            f"det_sdk.keras: Keras runs on backend {name!r}; det_sdk trains on 'tensorflow', "
            "'jax' and 'torch' (set KERAS_BACKEND to one of them)")
    backend: Backend = importlib.import_module(module).BACKEND
    return backend
