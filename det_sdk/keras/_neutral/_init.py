"""``det.keras.init()`` on JAX and PyTorch: the run opened as on TensorFlow
(``det_sdk.engine.run.open_run``), the backend's processes, Keras's seeds.

>>> # context = init("jax", hparams={"learning_rate": 0.01})
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from det_sdk.config import ExperimentConfig, JobConfig, Length
from det_sdk.core._context import context_of_run
from det_sdk.engine.policy import TrainingPolicy
from det_sdk.engine.run import open_run
from det_sdk.keras import _policy
from det_sdk.keras._neutral._backend import backend_named
from det_sdk.keras._neutral._context import NeutralKerasContext

__all__ = ["init"]

def init(backend_name: str, *, hparams: Mapping[str, Any] | None = None,
         config: str | os.PathLike[str] | Mapping[str, Any] | ExperimentConfig | None = None,
         runs_dir: str | os.PathLike[str] | None = None,
         resume: bool | int | str | None = None, seed: int | None = None,
         checkpoint_period: Length | Mapping[str, int] | bool = True,
         searched_stage: str | None = None) -> NeutralKerasContext:
    """The context of this process on backend ``backend_name`` (see ``det.keras.init``)."""
    backend = backend_named(backend_name)
    period = _policy.requested_period(checkpoint_period)
    dist = backend.processes()
    backend.prepare(dist)
    run = open_run(dist, config=config, hparams=hparams, runs_dir=runs_dir, resume=resume,
                   seed=seed)
    backend.set_seeds(run.seed)
    info = run.info if run.on_cluster else None
    core = context_of_run(run)
    if run.is_job:
        assert isinstance(run.config, JobConfig)
        return NeutralKerasContext(core=core, backend=backend, hparams=None,
                                   config_data=run.config.data, info=info,
                                   policy=TrainingPolicy(seed=run.seed, checkpoint_period=None))
    cfg = run.experiment_config
    if not run.on_cluster:
        _policy.stop_cleanly_before_fit(core)
    max_length = cfg.searcher.max_length if run.on_cluster and cfg and cfg.searcher else None
    return NeutralKerasContext(
        core=core, backend=backend, hparams=run.hparams,
        config_data=cfg.data if cfg else {}, info=info,
        policy=_policy.training_policy(cfg, seed=run.seed, max_length=max_length,
                                checkpoint_period=_policy.checkpoint_period(
                                    period, cfg, on_cluster=run.on_cluster)))
