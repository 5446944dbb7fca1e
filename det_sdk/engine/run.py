"""Open this process's run: the one place every front's ``init()`` reads the environment,
loads the config, picks the seed and opens the session (a local run directory, or the
master).

``det_sdk.core.init()``, ``det_sdk.keras.init()`` and ``det_sdk.pytorch.init()`` each
choose their distributed context (a framework's choice: Keras places each process on
its GPU or its share of the cores before TensorFlow starts) and call :func:`open_run`
with it; what they add on top is their framework's policy. Importing this module loads
no framework.

>>> import tempfile
>>> from det_sdk.distributed import SingleProcess
>>> run = open_run(SingleProcess(), runs_dir=tempfile.mkdtemp(), hparams={"lr": 0.1}, seed=7)
>>> run.session.run_id, run.seed, run.hparams["lr"], run.on_cluster
(1, 7, 0.1, False)
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from det_sdk.config import (
    ConfigError,
    ExperimentConfig,
    JobConfig,
    apply_environment_variables,
    load_yaml_file,
    parse_experiment_config,
    parse_job_config,
)
from det_sdk.distributed import Processes
from det_sdk.env import local_run
from det_sdk.errors import ArgumentTypeError, DetSdkError, StateError, UsageError
from det_sdk.hparams import HParams, local_hparams, merge_hparams
from det_sdk.info import ClusterInfo, get_cluster_info

# RunNotFoundError: what opening a run raises, for the fronts to catch (they import no session)
from det_sdk.session import (
    DEFAULT_RUNS_DIR,
    LocalSession,
    MasterSession,
    RunNotFoundError,
    Session,
)
from det_sdk.storage import open_storage

__all__ = ["OpenedRun", "RunNotFoundError", "load_config", "open_run"]


@dataclass(frozen=True)
class OpenedRun:
    """What :func:`open_run` decided, for a front to build its context on.

    ``info`` is the task's description on the cluster; off it, a stand-in with the same
    fields (``master_url`` empty, the run id as ``trial_id``, the run's recorded hparams
    and seed). ``hparams`` are this call's: the defaults given, overridden by the
    config's constants (on the cluster, by the trial's). ``config`` is an
    experiment config, a job config (``det job run``: an inference script, no
    ``hparams``), or None. ``seed`` is the run's (a resumed run's recorded one).
    """

    distributed: Processes
    session: Session
    info: ClusterInfo
    config: ExperimentConfig | JobConfig | None
    hparams: HParams | None
    seed: int
    on_cluster: bool

    @property
    def experiment_config(self) -> ExperimentConfig | None:
        """The experiment config, or None (no config, or a job's)."""
        return self.config if isinstance(self.config, ExperimentConfig) else None

    @property
    def is_job(self) -> bool:
        """A generic job (``det job run``, or a job config locally): nothing trains."""
        return isinstance(self.config, JobConfig)


def load_config(config: Any) -> ExperimentConfig | JobConfig | None:
    """An experiment config, or a job config (``det job run``'s) for inference scripts.

    ``config``: a YAML path, a mapping, a parsed config, or None for ``DET_CONFIG``'s.

    >>> load_config({"hyperparameters": {"lr": 0.1}}).hyperparameters["lr"].val
    0.1
    """
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


def open_run(
    distributed: Processes,
    *,
    config: Any = None,
    hparams: Mapping[str, Any] | None = None,
    runs_dir: str | os.PathLike[str] | None = None,
    resume: bool | int | str | None = None,
    seed: int | None = None,
) -> OpenedRun:
    """Open (or, with ``resume``, reopen) the run of this process; see ``det.keras.init``
    for the arguments. On the cluster (``DET_ALLOCATION_ID`` set) they are defaults at most:
    the task's environment decides, and ``hparams`` fill in what the trial's do not set."""
    if not isinstance(distributed, Processes):
        raise ArgumentTypeError("init: distributed must be a det_sdk DistributedContext (e.g. "
                                "from DistributedContext.from_tf_config()), got "
                                f"{type(distributed).__name__}")
    info = get_cluster_info()
    if info is not None and info.task_type == "COMMAND":  # det cmd run (issue 58)
        return _open_in_command(distributed, info, config, hparams or {}, runs_dir, resume,
                                seed)
    if info is not None:
        return _open_on_cluster(distributed, info, hparams or {})
    loaded = load_config(config)
    # the config's environment_variables, where the shell has not set them (the shell wins)
    apply_environment_variables(loaded)
    runs = Path(runs_dir or local_run().runs_dir or DEFAULT_RUNS_DIR)
    if isinstance(loaded, JobConfig):  # an inference script: it reads runs, trains nothing
        session = _open_local(distributed, runs, None, {
            "hparams": {}, "seed": 0, "config": loaded.model_dump(mode="json")})
        return OpenedRun(distributed, session, _local_info(session, "GENERIC", None), loaded,
                         None, 0, on_cluster=False)
    hp = local_hparams(loaded, hparams or {})
    session = _open_local(distributed, runs, _resume_target(resume), {
        "hparams": hp.to_dict(), "seed": _seed(loaded, seed),
        "config": loaded.model_dump(mode="json") if loaded else {},
    }, _storage_config(loaded))
    _start_profiler(session, distributed, loaded)
    info = _local_info(session, "TRIAL", hp)
    return OpenedRun(distributed, session, info, loaded, hp, info.trial_seed, on_cluster=False)


def _open_on_cluster(dist: Processes, info: ClusterInfo,
                     defaults: Mapping[str, Any]) -> OpenedRun:
    """A process the master launched: everything comes from the task's environment."""
    session = MasterSession(info, writer=dist.is_chief)
    if info.task_type == "GENERIC":
        return OpenedRun(dist, session, info, parse_job_config(info.config), None,
                         info.trial_seed, on_cluster=True)
    hp = HParams(merge_hparams(defaults, info.hparams))  # nested groups merge deeply
    config = parse_experiment_config(info.config)
    _start_profiler(session, dist, config)
    return OpenedRun(dist, session, info, config, hp, info.trial_seed, on_cluster=True)


def _start_profiler(session: Session, dist: Processes, config: ExperimentConfig | None) -> None:
    """The profiler of a trial's chief (det_sdk.profiler): system metrics are the
    machine's, sampled once (Determined samples on each node's first process; det_sdk's
    cluster is one host), and reported by the process that reports."""
    if dist.is_chief:
        from det_sdk.profiler import start_profiler

        start_profiler(session, config.profiling.model_dump() if config else None)


def _open_in_command(dist: Processes, info: ClusterInfo, config: Any,
                     defaults: Mapping[str, Any], runs_dir: Any, resume: Any,
                     seed: int | None) -> OpenedRun:
    """A process of a command (``det cmd run``): a local run in the command's working
    directory (``det_sdk.session.command`` says why), its hyperparameters the command
    config's over the script's (``hparams=`` and its config's), its metrics reported to the
    master as the command's, any trial's checkpoints read from the master."""
    from det_sdk.session.command import CommandSession

    loaded = load_config(config)
    apply_environment_variables(loaded)
    if isinstance(loaded, JobConfig):
        raise UsageError("init: a job config in a command: run batch inference as a job "
                         "(det job run CONFIG DIR), or give init an experiment config")
    runs = Path(runs_dir or local_run().runs_dir or DEFAULT_RUNS_DIR)
    command_hp = dict(info.hparams or {})
    hp = HParams(merge_hparams(local_hparams(loaded, merge_hparams(defaults, command_hp))
                               .to_dict(), command_hp))
    session = _open_local(dist, runs, _resume_target(resume), {
        "hparams": hp.to_dict(), "seed": _seed(loaded, seed),
        "config": loaded.model_dump(mode="json") if loaded else {},
    }, _storage_config(loaded), session_class=CommandSession)
    command_id = int(info.allocation_id.split("-")[1])  # command-<id>-<hex>
    cast(CommandSession, session).attach(info.master_url, info.session_token, command_id)
    run_info = _local_info(session, "TRIAL", hp)
    return OpenedRun(dist, session, run_info, loaded, hp, run_info.trial_seed,
                     on_cluster=False)


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


def _storage_config(config: ExperimentConfig | None) -> dict[str, Any] | None:
    """The config's ``checkpoint_storage`` as given (secrets included: the run's own
    record keeps them masked); None without a config (the run's folder)."""
    if config is None:
        return None
    return config.checkpoint_storage.model_dump(mode="json", exclude_none=True)


def _open_local(dist: Processes, runs: Path, target: str | None,
                new_run: Mapping[str, Any],
                storage_config: Mapping[str, Any] | None = None,
                session_class: type[LocalSession] = LocalSession) -> LocalSession:
    """Rank 0 creates (or reopens) the run; the other processes open it read-only.

    The others read the run's seed, hparams and config from its ``run.json``, so every
    process uses rank 0's (a drawn seed included: the data order depends on it).
    The checkpoint storage is tried first (a small write and delete on an object store),
    so a wrong key or bucket is refused before a run is made."""
    if dist.is_chief:
        try:
            if storage_config is not None:
                probe = open_storage(storage_config, runs)
                probe.check()
                probe.close()
            if target is not None:
                session = session_class.reopen(runs, target, storage_config=storage_config)
            else:
                session = session_class.create(runs, **new_run, storage_config=storage_config)
        except DetSdkError as err:  # the others wait on the broadcast: tell them, then raise
            if dist.size > 1:
                dist.broadcast(f"{type(err).__name__}: {err}")
            raise
        dist.broadcast(session.run_id)
        return session
    got = dist.broadcast(None)  # rank 0's run id (what the others send is ignored)
    if isinstance(got, str):
        raise StateError(f"rank 0 could not open the run: {got}")
    return session_class.reopen(runs, cast(int, got), writer=False,
                                storage_config=storage_config)


def _local_info(session: LocalSession, task_type: Any, hp: HParams | None) -> ClusterInfo:
    """The local stand-in for the cluster's description: scripts read the same fields
    (a resumed run's recorded hparams and seed)."""
    run = session.info
    return ClusterInfo(
        master_url="", session_token="", allocation_id=f"local-run-{session.run_id}",
        task_type=task_type, trial_id=session.run_id if task_type == "TRIAL" else None,
        trial_seed=int(run.get("seed", 0)),
        hparams=dict(run.get("hparams") or (hp.to_dict() if hp else {})),
        latest_checkpoint=session.latest_checkpoint, config=dict(run.get("config") or {}),
    )
