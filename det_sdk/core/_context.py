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
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from det_sdk.config import ExperimentConfig, Length
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
from det_sdk.engine.run import open_run
from det_sdk.hparams import HParams
from det_sdk.info import ClusterInfo
from det_sdk.session import Session

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
    that run's latest and its ``trial_id`` that run's) and ``seed``. The run is opened
    as ``det.keras.init()`` opens it (:func:`det_sdk.engine.run.open_run`).

    >>> with det.core.init() as core_context:  # doctest: +SKIP
    ...     print(core_context.distributed.rank, core_context.info.trial.trial_id)
    """
    if distributed is None:
        # horovodrun-provided ranks: Horovod's collectives (imports TensorFlow, as it must)
        distributed = HorovodProcesses() if launched_by_horovod() else SingleProcess()
    run = open_run(distributed, config=config, hparams=hparams, runs_dir=runs_dir,
                   resume=resume, seed=seed)
    cfg = run.experiment_config
    local_length = None
    if not run.on_cluster and cfg is not None and cfg.searcher is not None:
        local_length = cfg.searcher.max_length  # off the cluster: the searcher's one length
    return Context(distributed=run.distributed, session=run.session, info=run.info,
                   config=cfg, local_length=local_length)
