"""``det_sdk.core.init()``: one context per concern, over det_sdk's seams.

On the cluster (the master launched this process) the contexts talk to the master
through :class:`det_sdk.session.MasterSession`; off it they keep a local run
directory (:class:`det_sdk.session.LocalSession`, as ``det.keras.init()`` does):
metrics, checkpoints and TensorBoard files under ``det-runs/<n>/``.

The context is the only seam the fronts (``det_sdk.keras``, ``det_sdk.pytorch``) use: what
they need beyond Determined's core API is on it and its sub-contexts as det_sdk
extensions (each one's docstring says so); the session stays inside ``det_sdk.core``.

>>> import tempfile
>>> with init(runs_dir=tempfile.mkdtemp()) as core_context:
...     core_context.train.report_training_metrics(steps_completed=1, metrics={"loss": 1.0})
...     core_context.info.trial.trial_id
1
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from det_sdk.config import ExperimentConfig, Length
from det_sdk.core._checkpoint import CheckpointContext
from det_sdk.core._preempt import PreemptContext
from det_sdk.core._profiler import ProfilerContext
from det_sdk.core._searcher import SearcherContext
from det_sdk.core._train import TrainContext
from det_sdk.distributed import (
    Processes,
    SingleProcess,
    front_builder,
    launched_by_horovod,
)
from det_sdk.engine.run import OpenedRun, open_run
from det_sdk.errors import UsageError
from det_sdk.hparams import HParams
from det_sdk.info import ClusterInfo
from det_sdk.profiler import BatchTimer
from det_sdk.session import LocalSession, Session

__all__ = ["Context", "context_of_run", "init"]


class Context:
    """What :func:`init` returns: ``distributed``, ``train``, ``checkpoint``, ``preempt``,
    ``searcher`` and ``info``. Use it as a context manager; leaving the block delivers
    pending reports::

        with det.core.init() as core_context:
            main(core_context)
    """

    def __init__(self, *, distributed: Processes, session: Session,
                 info: ClusterInfo, config: ExperimentConfig | None,
                 local_length: Length | None = None) -> None:
        self.distributed = distributed
        self.info = info
        self.train = TrainContext(session, distributed)
        self.checkpoint = CheckpointContext(session, distributed)
        self.preempt = PreemptContext(session, distributed)
        self.searcher = SearcherContext(session, distributed, local_length)
        self.profiler = ProfilerContext(session, distributed)
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

    def alert(self, title: str | None = None, description: str | None = None,
              level: str | None = "info") -> None:
        """Determined's custom alert: an event to the master's webhooks that have a
        ``CUSTOM`` trigger and that this experiment's config names
        (``integrations.webhooks``); ``level``: ``"debug"``, ``"info"``, ``"warn"`` or
        ``"error"``. It never blocks training (queued with the reports). Off the cluster
        there are no webhooks: it is logged at its level.

        >>> import tempfile
        >>> with init(runs_dir=tempfile.mkdtemp()) as core_context:
        ...     core_context.alert(title="loss spiked", description="at step 40", level="warn")
        """
        levels = {"debug": "DEBUG", "info": "INFO", "warn": "WARNING", "error": "ERROR"}
        key = "info" if level is None else str(level).lower()
        if key not in levels:
            raise UsageError(f"alert: level {level!r}: expected one of "
                             f"{', '.join(levels)}")
        self._session.alert(title or "", description or "", levels[key])

    # --- det_sdk extensions: what the fronts need beyond Determined's core API ----------

    @property
    def run_id(self) -> int | str | None:
        """det_sdk extension: the id this process's records are kept under: the local run's
        (``det-runs/<id>``) off the cluster, the trial's on it; None in a job on the
        cluster (``det job run``), which has no trial."""
        return self._session.trial_id

    @property
    def local_run_dir(self) -> Path | None:
        """det_sdk extension: the local run's directory (``det-runs/<id>``); None on the
        cluster."""
        return self._session.run_dir if isinstance(self._session, LocalSession) else None

    @property
    def tensorboard_dir(self) -> Path | None:
        """det_sdk extension: where this trial's TensorBoard event files go
        (``det-runs/<id>/tensorboard`` locally; the trial's folder in checkpoint storage
        on the cluster, which ``det tensorboard`` reads); None when there is none."""
        return self._session.tensorboard_dir

    @property
    def files_dir(self) -> Path | None:
        """det_sdk extension: where the relative files that callbacks write are kept (on the
        cluster a folder of the trial's in checkpoint storage, which outlives the trial's
        working directory); None: as given, in the working directory."""
        return self._session.files_dir

    @property
    def batch_timer(self) -> BatchTimer | None:
        """det_sdk extension: the profiler's per-batch timer (det_sdk.profiler), which
        the Keras engine and the PyTorch Trainer tell of each batch and checkpoint;
        None when the profiler is off (``profiling: {enabled: false}``) or in another
        process than the chief."""
        profiler = self._session.profiler
        return profiler.timer if profiler is not None else None

    def resume_hint(self) -> str:
        """det_sdk extension: how a user continues this trial after it stopped (shown when
        it stops); "" when there is nothing to say (the master resumes it)."""
        return self._session.resume_hint()

    def discard_if_empty(self) -> bool:
        """det_sdk extension: remove the local run this process created if it holds no
        checkpoint nor metric (a run stopped before training), so no half-made run is
        left; whether it was removed. Nothing on the cluster (False)."""
        if isinstance(self._session, LocalSession):
            return self._session.discard_if_empty()
        return False

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
    distributed: Processes | None = None,
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
        distributed = (front_builder("horovod")() if launched_by_horovod()
                       else SingleProcess())
    run = open_run(distributed, config=config, hparams=hparams, runs_dir=runs_dir,
                   resume=resume, seed=seed)
    cfg = run.experiment_config
    local_length = None
    if not run.on_cluster and cfg is not None and cfg.searcher is not None:
        local_length = cfg.searcher.max_length  # off the cluster: the searcher's one length
    return context_of_run(run, local_length=local_length)


def context_of_run(run: OpenedRun, *, local_length: Length | None = None) -> Context:
    """The core context over a run opened by :func:`det_sdk.engine.run.open_run`: what
    :func:`init` returns, and what ``det.keras.init()`` builds its ``KerasContext`` on
    (each front keeps its own choices: the distributed context, process placement,
    seeding). ``local_length``: off the cluster, the searcher's one length (None: the
    script's own, as ``context.fit``'s ``epochs``).

    >>> import tempfile
    >>> from det_sdk.distributed import SingleProcess
    >>> ctx = context_of_run(open_run(SingleProcess(), runs_dir=tempfile.mkdtemp()))
    >>> ctx.run_id, ctx.searcher.current_length() is None
    (1, True)
    >>> ctx.close()
    """
    return Context(distributed=run.distributed, session=run.session, info=run.info,
                   config=run.experiment_config, local_length=local_length)
