"""``det.keras.init()``: det.core's opening (``det_sdk.engine.run.open_run``: the
environment, the config, the seed, the run's records; then the ``det_sdk.core.Context`` over
them, as ``det.core.init()`` builds it) with Keras's choices on top: its distributed context,
each process placed on its GPU or its share of the cores, TensorFlow's seeds, and the
training policy (checkpoint, validation and report periods) that ``context.fit`` follows."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from det_sdk.config import ExperimentConfig, JobConfig, Length
from det_sdk.core._context import context_of_run
from det_sdk.distributed import (
    Processes,
    SingleProcess,
    launched_by_horovod,
)
from det_sdk.engine.policy import TrainingPolicy
from det_sdk.engine.run import OpenedRun, open_run
from det_sdk.keras import _compat, _policy
from det_sdk.keras._context import KerasContext
from det_sdk.keras._horovod import HorovodProcesses
from det_sdk.stages import check_stage_name

__all__ = ["init"]

def _set_seeds(seed: int) -> None:
    # The same seed on every process, as on one: a script's own data preparation
    # (np.random.permutation, validation_split, a tf.data shuffle before wrap_data)
    # gives every rank the same arrays, so the shards are disjoint parts of one data
    # set. Dropout masks still differ per shard: the fit folds each rank into its
    # layers' random state (TrainingLoop.prepare). Layers keep that state in
    # variables that checkpoints save, so a resumed run draws what an uninterrupted
    # one would have.
    _compat.set_seeds(seed)


def _distributed() -> Processes:
    if not launched_by_horovod():
        return SingleProcess()
    dist = HorovodProcesses()
    _place_process(dist)
    return dist


def _place_process(dist: Processes) -> None:
    """Give each of the processes on a host its own GPU, or its share of the cores.

    Must run before TensorFlow starts its runtime (the first op).
    """
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        gpu = gpus[dist.local_rank % len(gpus)]
        tf.config.experimental.set_memory_growth(gpu, True)
        tf.config.set_visible_devices(gpu, "GPU")
        return
    # N processes that each start a thread per core oversubscribe the host
    # (measured: 0.68x of one process's throughput with 2 on 2 cores, 0.76x shared).
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    share = max(1, (cores or 1) // dist.local_size)
    tf.config.threading.set_intra_op_parallelism_threads(share)
    tf.config.threading.set_inter_op_parallelism_threads(share)


def init(
    *,
    hparams: Mapping[str, Any] | None = None,
    config: str | os.PathLike[str] | Mapping[str, Any] | ExperimentConfig | None = None,
    runs_dir: str | os.PathLike[str] | None = None,
    resume: bool | int | str | None = None,
    seed: int | None = None,
    checkpoint_period: Length | Mapping[str, int] | bool = True,
    searched_stage: str | None = None,
) -> KerasContext:
    """The context of this process on TensorFlow: see :func:`det_sdk.keras.init`."""
    if searched_stage is not None:
        check_stage_name(searched_stage)
    period = _policy.requested_period(checkpoint_period)
    run = open_run(_distributed(), config=config, hparams=hparams, runs_dir=runs_dir,
                   resume=resume, seed=seed)
    _set_seeds(run.seed)
    return _keras_context(run, period, searched_stage)


def _keras_context(run: OpenedRun, requested_period: Length | bool,
                   searched_stage: str | None) -> KerasContext:
    """The run's core context, with the Keras training policy on top."""
    info = run.info if run.on_cluster else None
    # no local length: off the cluster a fit trains its own epochs
    core = context_of_run(run)
    if run.is_job:  # an inference script (det job run, or a job config locally)
        assert isinstance(run.config, JobConfig)
        return KerasContext(core=core, hparams=None,
                            config_data=run.config.data, info=info,
                            policy=TrainingPolicy(seed=run.seed, checkpoint_period=None))
    cfg = run.experiment_config
    period = _policy.checkpoint_period(requested_period, cfg, on_cluster=run.on_cluster)
    max_length = None
    if run.on_cluster:  # the searcher's whole length (locally: fit's epochs)
        max_length = cfg.searcher.max_length if cfg and cfg.searcher else None
    else:
        _policy.stop_cleanly_before_fit(core)
    return KerasContext(
        core=core, hparams=run.hparams,
        config_data=cfg.data if cfg else {}, info=info,
        policy=_policy.training_policy(cfg, seed=run.seed, checkpoint_period=period,
                                max_length=max_length),
        searched_stage=searched_stage,
    )
