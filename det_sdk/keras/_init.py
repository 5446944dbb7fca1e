"""``det.keras.init()``: det.core's opening (``det_sdk.engine.run.open_run``: the
environment, the config, the seed, the run's records; then the ``det_sdk.core.Context`` over
them, as ``det.core.init()`` builds it) with Keras's choices on top: its distributed context,
each process placed on its GPU or its share of the cores, TensorFlow's seeds, and the
training policy (checkpoint, validation and report periods) that ``context.fit`` follows."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from det_sdk.config import ConfigError, ExperimentConfig, JobConfig, Length
from det_sdk.core._context import Context, context_of_run
from det_sdk.distributed import (
    Processes,
    SingleProcess,
    launched_by_horovod,
)
from det_sdk.engine.policy import TrainingPolicy
from det_sdk.engine.run import OpenedRun, open_run
from det_sdk.errors import ArgumentTypeError
from det_sdk.keras import _compat
from det_sdk.keras._context import KerasContext
from det_sdk.keras._horovod import HorovodProcesses
from det_sdk.stages import check_stage_name

__all__ = ["init"]

_DEFAULT_CHECKPOINT_PERIOD = Length(epochs=1)


def _set_seeds(seed: int) -> None:
    # The same seed on every process, as on one: a script's own data preparation
    # (np.random.permutation, validation_split, a tf.data shuffle before wrap_data)
    # gives every rank the same arrays, so the shards are disjoint parts of one data
    # set. Dropout masks still differ per shard: the fit folds each rank into its
    # layers' random state (TrainingLoop.prepare). Layers keep that state in
    # variables that checkpoints save, so a resumed run draws what an uninterrupted
    # one would have.
    _compat.set_seeds(seed)


_EXIT_CODES = {signal.SIGTERM: 0, signal.SIGINT: 130}


def _stop_cleanly_before_fit(core: Context) -> None:
    """SIGTERM or Ctrl-C before ``fit`` (loading data, building the model): exit cleanly.

    A run this process just created and that holds no checkpoint yet is removed,
    so no empty run directory is left. During ``fit`` its own handlers take over
    (checkpoint, then exit); after it, these apply again.
    """
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, frame: Any) -> None:
        removed = core.discard_if_empty()
        name = signal.Signals(signum).name
        if removed:
            said = f"before training; run {core.run_id} removed (nothing trained)"
        else:  # between or after fits: what the fits trained is in their checkpoints
            said = (f"outside a fit; its checkpoints are kept (DET_RESUME=latest continues "
                    f"run {core.run_id})")
        print(f"det_sdk: stopped by {name} {said}.", file=sys.stderr, flush=True)
        raise SystemExit(_EXIT_CODES[signal.Signals(signum)])

    for signum in _EXIT_CODES:
        signal.signal(signum, handler)


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
    """The context of this training (or inference) process.

    Off the cluster (no ``DET_ALLOCATION_ID`` in the environment):

    - ``hparams``: default hyperparameter values; constants of the config override
      them, and searched ones in the config need a value here.
    - ``config``: an experiment config (YAML path, mapping or parsed); ``DET_CONFIG`` names
      one when not given. Its ``data`` section is ``context.config_data``; its
      ``environment.environment_variables`` are set in ``os.environ`` here, except
      those the shell already set (the shell wins). TensorFlow has started by then:
      variables it reads at start-up (``TF_CPP_MIN_LOG_LEVEL``, ``OMP_NUM_THREADS``)
      take effect locally only from the shell.
    - ``runs_dir``: where local runs live (``DET_RUNS_DIR``, default ``./det-runs``);
      each run is ``<runs_dir>/<n>`` with metrics, TensorBoard events and checkpoints.
    - ``resume``: continue a run from its latest checkpoint: a run id, or ``"latest"``
      / ``True`` (``DET_RESUME`` works the same). The run's recorded seed is reused.
    - ``seed``: seeds Python, NumPy and TF; else the config's
      ``reproducibility.experiment_seed``; else a random one, recorded.
    - ``checkpoint_period``: ``Length(epochs=1)`` by default (or the config's
      ``min_checkpoint_period``); ``False`` turns checkpoints off.
    - ``searched_stage``: with several ``fit`` calls (stages), the one the searcher's
      length applies to on the cluster (``context.fit(..., stage=NAME)``); default the
      first ``fit``. Named here because the searcher must know it when the first ``fit``
      starts. The other stages train their own ``epochs``.

    Example::

        import det_sdk as det
        context = det.keras.init(hparams={"learning_rate": 0.01}, config="const.yaml")
        context.training.hparams["learning_rate"]  # 0.01
    """
    if searched_stage is not None:
        check_stage_name(searched_stage)
    period = _requested_period(checkpoint_period)
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
    period = _checkpoint_period(requested_period, cfg, on_cluster=run.on_cluster)
    max_length = None
    if run.on_cluster:  # the searcher's whole length (locally: fit's epochs)
        max_length = cfg.searcher.max_length if cfg and cfg.searcher else None
    else:
        _stop_cleanly_before_fit(core)
    return KerasContext(
        core=core, hparams=run.hparams,
        config_data=cfg.data if cfg else {}, info=info,
        policy=_training_policy(cfg, seed=run.seed, checkpoint_period=period,
                                max_length=max_length),
        searched_stage=searched_stage,
    )


def _training_policy(
    cfg: ExperimentConfig | None, *, seed: int, checkpoint_period: Length | None,
    max_length: Length | None = None,
) -> TrainingPolicy:
    """What the config says about checkpointing, validating and reporting during ``fit``."""
    if cfg is None:
        return TrainingPolicy(seed=seed, checkpoint_period=checkpoint_period,
                              report_every=ExperimentConfig().scheduling_unit)
    return TrainingPolicy(
        seed=seed, checkpoint_period=checkpoint_period, max_length=max_length,
        validation_period=cfg.min_validation_period, report_every=cfg.scheduling_unit,
        searcher_metric=cfg.searcher_metric[0],
    )


def _requested_period(value: Any) -> Length | bool:
    """``checkpoint_period`` as given: a length, ``False`` (off) or ``True`` (the default).

    Checked before the run is opened, so a bad one leaves no run directory behind."""
    if value is None or isinstance(value, bool):
        return value is not False
    if isinstance(value, Length):
        return value
    if isinstance(value, Mapping):
        try:
            return Length.model_validate(value)
        except Exception as err:
            raise ConfigError(f"init: checkpoint_period: {err}") from None
    raise ArgumentTypeError(
        "init: checkpoint_period must be True, False, or a length like {'epochs': 1}, "
        f"got {value!r}"
    )


def _checkpoint_period(requested: Length | bool, cfg: ExperimentConfig | None,
                       *, on_cluster: bool) -> Length | None:
    if requested is False and not on_cluster:
        return None
    # On the cluster checkpoints cannot be turned off: pause and restarts need them.
    if isinstance(requested, Length):
        return requested
    return (cfg.min_checkpoint_period if cfg else None) or _DEFAULT_CHECKPOINT_PERIOD
