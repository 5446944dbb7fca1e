"""What ``det.keras.init()`` decides about training on every backend: the checkpoint
period asked for, the config's validation and report periods, and a clean exit on a
signal before ``fit`` starts. Imports no framework.

>>> requested_period({"batches": 10}).batches
10
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Mapping
from typing import Any

from det_sdk.config import ConfigError, ExperimentConfig, Length
from det_sdk.core._context import Context
from det_sdk.engine.policy import TrainingPolicy
from det_sdk.errors import ArgumentTypeError

__all__ = ["checkpoint_period", "requested_period", "stop_cleanly_before_fit",
           "training_policy"]

_DEFAULT_CHECKPOINT_PERIOD = Length(epochs=1)

_EXIT_CODES = {signal.SIGTERM: 0, signal.SIGINT: 130}


def stop_cleanly_before_fit(core: Context) -> None:
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


def training_policy(
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


def requested_period(value: Any) -> Length | bool:
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


def checkpoint_period(requested: Length | bool, cfg: ExperimentConfig | None,
                       *, on_cluster: bool) -> Length | None:
    if requested is False and not on_cluster:
        return None
    # On the cluster checkpoints cannot be turned off: pause and restarts need them.
    if isinstance(requested, Length):
        return requested
    return (cfg.min_checkpoint_period if cfg else None) or _DEFAULT_CHECKPOINT_PERIOD
