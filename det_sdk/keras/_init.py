"""``det.keras.init()``: read the environment once and choose each seam's implementation."""

from __future__ import annotations

import os
import secrets
import signal
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tensorflow as tf

from det_sdk.config import (
    ConfigError,
    ExperimentConfig,
    JobConfig,
    Length,
    apply_environment_variables,
    load_yaml_file,
    parse_experiment_config,
    parse_job_config,
)
from det_sdk.distributed import (
    DistributedContext,
    HorovodProcesses,
    SingleProcess,
    launched_by_horovod,
)
from det_sdk.env import local_run
from det_sdk.errors import ArgumentTypeError, UsageError
from det_sdk.hparams import HParams, local_hparams, merge_hparams
from det_sdk.info import ClusterInfo, get_cluster_info
from det_sdk.keras import _compat
from det_sdk.keras._context import KerasContext
from det_sdk.keras._loop import TrainingPolicy
from det_sdk.session import DEFAULT_RUNS_DIR, LocalSession, MasterSession
from det_sdk.stages import check_stage_name

__all__ = ["init"]

_DEFAULT_CHECKPOINT_PERIOD = Length(epochs=1)


def _load_config(config: Any) -> ExperimentConfig | JobConfig | None:
    """An experiment config, or a job config (``det job run``'s) for inference scripts."""
    if config is None:
        config = local_run().config
    if config is None:
        return None
    if isinstance(config, (ExperimentConfig, JobConfig)):
        return config
    if not isinstance(config, (str, os.PathLike, Mapping)):
        raise ArgumentTypeError(
            f"init: config must be a path to a YAML file or a mapping, got {type(config).__name__}"
        )
    raw = load_yaml_file(config) if isinstance(config, (str, os.PathLike)) else config
    try:
        return parse_experiment_config(raw, warn_ignored=True)
    except ConfigError as as_experiment:
        try:
            return parse_job_config(raw)
        except ConfigError:
            source = f" {config}" if isinstance(config, (str, os.PathLike)) else ""
            raise ConfigError(str(as_experiment).replace(
                "invalid experiment config", f"invalid experiment config{source}", 1)) from None


def _runs_dir(runs_dir: Any) -> Path:
    """Where local runs live: the argument, else ``DET_RUNS_DIR``, else ``./det-runs``."""
    return Path(runs_dir or local_run().runs_dir or DEFAULT_RUNS_DIR)


def _resume_target(resume: Any) -> str | None:
    if resume is None:
        resume = local_run().resume
    if resume is None or resume is False:
        return None
    if resume is True:
        return "latest"
    return str(resume)


def _seed(config: ExperimentConfig | None, seed: int | None) -> int:
    if seed is None and config is not None:
        seed = config.reproducibility.experiment_seed
    if seed is None:
        seed = secrets.randbelow(2**31)  # recorded in the run and its checkpoints
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**31:
        raise UsageError(f"init: seed must be an int in [0, 2**31), got {seed!r}")
    return seed


def _set_seeds(seed: int, rank: int) -> None:
    # Each process draws its own random numbers (dropout masks differ per shard,
    # like per sample; weights start equal anyway because fit broadcasts rank 0's),
    # but TF's global seed is the same everywhere: a tf.data pipeline shuffled
    # before wrap_data must give every process the same order, or its shards
    # overlap. Layers keep their random state in variables that checkpoints save,
    # so a resumed run draws the masks an uninterrupted one would have.
    _compat.set_seeds(seed, rank)


_EXIT_CODES = {signal.SIGTERM: 0, signal.SIGINT: 130}


def _stop_cleanly_before_fit(session: LocalSession) -> None:
    """SIGTERM or Ctrl-C before ``fit`` (loading data, building the model): exit cleanly.

    A run this process just created and that holds no checkpoint yet is removed,
    so no empty run directory is left. During ``fit`` its own handlers take over
    (checkpoint, then exit); after it, these apply again.
    """
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, frame: Any) -> None:
        removed = session.discard_if_empty()
        what = f"run {session.run_id} removed (nothing trained)" if removed else "exiting"
        print(f"det_sdk: stopped by {signal.Signals(signum).name} before training; {what}.",
              file=sys.stderr, flush=True)
        raise SystemExit(_EXIT_CODES[signum])

    for signum in _EXIT_CODES:
        signal.signal(signum, handler)


def _distributed() -> DistributedContext:
    if not launched_by_horovod():
        return SingleProcess()
    dist = HorovodProcesses()
    _place_process(dist)
    return dist


def _place_process(dist: DistributedContext) -> None:
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


def _open_session(
    dist: DistributedContext, runs: Path, target: str | None, new_run: Mapping[str, Any]
) -> LocalSession:
    """Rank 0 creates (or reopens) the run; the other processes open it read-only."""
    if dist.is_chief:
        if target is not None:
            session = LocalSession.reopen(runs, target)
        else:
            session = LocalSession.create(runs, **new_run)
        dist.broadcast(session.run_id)
        return session
    run_id = dist.broadcast(None)
    return LocalSession.reopen(runs, run_id, writer=False)


def init(
    *,
    hparams: Mapping[str, Any] | None = None,
    config: str | os.PathLike[str] | Mapping[str, Any] | None = None,
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
    - ``config``: an experiment config (YAML path or mapping); ``DET_CONFIG`` names
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
    info = get_cluster_info()
    if info is not None:
        return _init_on_cluster(info, hparams or {}, checkpoint_period, searched_stage)
    loaded = _load_config(config)
    # the config's environment_variables, where the shell has not set them (the shell wins)
    apply_environment_variables(loaded)
    if isinstance(loaded, JobConfig):  # an inference script: no training here
        return _init_local_job(loaded, runs_dir)
    cfg = loaded
    hp = local_hparams(cfg, hparams or {})
    period = _checkpoint_period(checkpoint_period, cfg)
    dist = _distributed()
    runs = _runs_dir(runs_dir)
    target = _resume_target(resume)
    # Every process must use one seed (the data order depends on it): rank 0's.
    new_seed = dist.broadcast(_seed(cfg, seed))
    session = _open_session(dist, runs, target, {
        "hparams": hp.to_dict(), "seed": new_seed,
        "config": cfg.model_dump(mode="json") if cfg else {},
    })
    run_seed = int(session.info["seed"])
    _set_seeds(run_seed, dist.rank)
    _stop_cleanly_before_fit(session)
    return KerasContext(
        distributed=dist,
        session=session,
        hparams=hp,
        config_data=cfg.data if cfg else {},
        policy=_training_policy(cfg, seed=run_seed, checkpoint_period=period),
        searched_stage=searched_stage,
    )


def _init_local_job(job: JobConfig, runs_dir: Any) -> KerasContext:
    """A job config off the cluster (batch inference): reads runs, trains nothing."""
    dist = _distributed()
    runs = _runs_dir(runs_dir)
    session = _open_session(dist, runs, None, {"hparams": {}, "seed": 0,
                                               "config": job.model_dump(mode="json")})
    _set_seeds(0, dist.rank)
    return KerasContext(distributed=dist, session=session, hparams=None, config_data=job.data,
                        policy=TrainingPolicy(seed=0, checkpoint_period=None))


def _init_on_cluster(
    info: ClusterInfo, defaults: Mapping[str, Any], checkpoint_period: Any,
    searched_stage: str | None = None,
) -> KerasContext:
    """A process launched by the master: everything comes from the environment."""
    dist = _distributed()
    _set_seeds(info.trial_seed, dist.rank)
    session = MasterSession(info, writer=dist.is_chief)
    if info.task_type == "GENERIC":
        job = parse_job_config(info.config)
        return KerasContext(distributed=dist, session=session, hparams=None,
                            config_data=job.data, info=info,
                            policy=TrainingPolicy(seed=info.trial_seed, checkpoint_period=None))
    cfg = parse_experiment_config(info.config)
    hp = HParams(merge_hparams(defaults, info.hparams))  # nested groups merge deeply
    # On the cluster checkpoints cannot be turned off: pause and restarts need them.
    period = _checkpoint_period(True if checkpoint_period is False else checkpoint_period, cfg)
    return KerasContext(
        distributed=dist, session=session, hparams=hp, config_data=cfg.data, info=info,
        policy=_training_policy(cfg, seed=info.trial_seed, checkpoint_period=period,
                                max_length=cfg.searcher.max_length if cfg.searcher else None),
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


def _checkpoint_period(value: Any, cfg: ExperimentConfig | None) -> Length | None:
    if value is False:
        return None
    if value is True or value is None:
        return (cfg.min_checkpoint_period if cfg else None) or _DEFAULT_CHECKPOINT_PERIOD
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
