"""``det_sdk.core.init()``: one context per concern, over det_sdk's seams.

On the cluster (the master launched this process) the contexts talk to the master
through :class:`det_sdk.session.MasterSession`; off it they keep a local run
directory (:class:`det_sdk.session.LocalSession`, as ``det.keras.init()`` does):
metrics, checkpoints and TensorBoard files under ``det-runs/<n>/``.

>>> import tempfile
>>> with init(runs_dir=tempfile.mkdtemp()) as core_context:
...     core_context.train.report_training_metrics(steps_completed=1, metrics={"loss": 1.0})
...     core_context.info.trial.trial_id
1
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from det_sdk.config import (
    ExperimentConfig,
    Length,
    apply_environment_variables,
    load_yaml_file,
    parse_experiment_config,
)
from det_sdk.core._checkpoint import CheckpointContext
from det_sdk.core._preempt import PreemptContext
from det_sdk.core._searcher import SearcherContext
from det_sdk.core._train import TrainContext
from det_sdk.distributed import (
    DistributedContext,
    HorovodProcesses,
    SingleProcess,
    launched_by_horovod,
)
from det_sdk.env import local_run
from det_sdk.errors import ArgumentTypeError
from det_sdk.hparams import HParams, local_hparams
from det_sdk.info import ClusterInfo, get_cluster_info
from det_sdk.session import DEFAULT_RUNS_DIR, LocalSession, MasterSession, Session

__all__ = ["Context", "init"]


class Context:
    """What :func:`init` returns: ``distributed``, ``train``, ``checkpoint``, ``preempt``,
    ``searcher`` and ``info``. Use it as a context manager; leaving the block delivers
    pending reports::

        with det.core.init() as core_context:
            main(core_context)
    """

    def __init__(self, *, distributed: DistributedContext, session: Session,
                 info: ClusterInfo, config: ExperimentConfig | None,
                 local_length: Length | None = None) -> None:
        self.distributed = distributed
        self.info = info
        self.train = TrainContext(session, distributed)
        self.checkpoint = CheckpointContext(session, distributed)
        self.preempt = PreemptContext(session, distributed)
        self.searcher = SearcherContext(session, distributed, local_length)
        self._session = session
        self._config = config

    @property
    def hparams(self) -> HParams:
        """The trial's hyperparameters (the local run's off the cluster)."""
        return HParams(self.info.hparams)

    @property
    def searcher_metric(self) -> tuple[str, bool]:
        """(metric name, smaller is better) from the config; ``val_loss`` by default."""
        return (self._config or ExperimentConfig()).searcher_metric

    @property
    def max_length(self) -> Length | None:
        """The config's ``searcher.max_length`` (the whole training length), if any."""
        searcher = self._config.searcher if self._config else None
        return searcher.max_length if searcher else None

    def close(self) -> None:
        """Deliver what is pending and release the session."""
        self._session.close()
        close = getattr(self.distributed, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> Context:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _distributed(given: DistributedContext | None) -> DistributedContext:
    if given is not None:
        if not isinstance(given, DistributedContext):
            raise ArgumentTypeError("init: distributed must be a det_sdk DistributedContext (e.g. "
                                    "from DistributedContext.from_tf_config()), got "
                                    f"{type(given).__name__}")
        return given
    # horovodrun-provided ranks: Horovod's collectives (imports TensorFlow, as it must)
    return HorovodProcesses() if launched_by_horovod() else SingleProcess()


def _load_config(config: Any) -> ExperimentConfig | None:
    config = config if config is not None else local_run().config
    if config is None or isinstance(config, ExperimentConfig):
        return config
    if isinstance(config, (str, os.PathLike)):
        return parse_experiment_config(load_yaml_file(config))
    if isinstance(config, Mapping):
        return parse_experiment_config(config)
    raise ArgumentTypeError("init: config must be a YAML path or a mapping, got "
                            f"{type(config).__name__}")


def init(
    *,
    distributed: DistributedContext | None = None,
    config: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    hparams: Mapping[str, Any] | None = None,
    runs_dir: str | os.PathLike[str] | None = None,
    resume: int | str | None = None,
    seed: int | None = None,
) -> Context:
    """The core context of this process (Determined's ``det.core.init``).

    ``distributed``: from :meth:`DistributedContext.from_tf_config` (TensorFlow
    launcher) or ``from_horovod``; by default Horovod's under ``horovodrun``, else
    one process. On the cluster everything else comes from the master. Off it:
    ``config`` (YAML path or mapping, or ``DET_CONFIG``; its constants are the
    hparams, ``searcher.max_length`` the searcher's one length), ``hparams``
    (defaults), ``runs_dir`` (``DET_RUNS_DIR``, default ``./det-runs``), ``resume``
    (a run id or ``"latest"``, or ``DET_RESUME``: its ``info.latest_checkpoint`` is
    that run's latest and its ``trial_id`` that run's) and ``seed``.

    >>> with det.core.init() as core_context:  # doctest: +SKIP
    ...     print(core_context.distributed.rank, core_context.info.trial.trial_id)
    """
    dist = _distributed(distributed)
    info = get_cluster_info()
    if info is not None:
        session: Session = MasterSession(info, writer=dist.is_chief)
        cfg = parse_experiment_config(info.config) if info.task_type == "TRIAL" else None
        return Context(distributed=dist, session=session, info=info, config=cfg)
    cfg = _load_config(config)
    # the config's environment_variables, where the shell has not set them (the shell wins)
    apply_environment_variables(cfg)
    hp = local_hparams(cfg, hparams or {})
    given = local_run()
    runs = Path(runs_dir or given.runs_dir or DEFAULT_RUNS_DIR)
    target = resume if resume is not None else given.resume
    if seed is None and cfg is not None:
        seed = cfg.reproducibility.experiment_seed
    new_seed = seed if seed is not None else secrets.randbelow(2**31)
    if dist.is_chief:
        local = (LocalSession.reopen(runs, str(target)) if target is not None else
                 LocalSession.create(runs, hparams=hp.to_dict(), seed=new_seed,
                                     config=cfg.model_dump(mode="json") if cfg else {}))
        if dist.size > 1:
            dist.broadcast(local.run_id)
    else:
        local = LocalSession.reopen(runs, dist.broadcast(None), writer=False)
    # The local stand-in for the cluster's description: scripts read the same fields.
    local_info = ClusterInfo(
        master_url="", session_token="", allocation_id=f"local-run-{local.run_id}",
        task_type="TRIAL", trial_id=local.run_id, trial_seed=int(local.info.get("seed", 0)),
        hparams=dict(local.info.get("hparams") or hp.to_dict()),
        latest_checkpoint=local.latest_checkpoint, config=dict(local.info.get("config") or {}),
    )
    return Context(distributed=dist, session=local, info=local_info, config=cfg,
                   local_length=cfg.searcher.max_length if cfg and cfg.searcher else None)
