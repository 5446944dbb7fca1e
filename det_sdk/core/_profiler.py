"""``core_context.profiler``: Determined 0.38's ``ProfilerContext``, turning the system
metrics sampler (det_sdk.profiler) on and off by hand.

det_sdk's profiler already runs from the start at the config's rate (``profiling:``);
``on()`` restarts it at the rate given, ``off()`` stops it. Only the chief samples.

Per-batch timings (det_sdk's extension: Determined's Core API has no training loop to
time): a Core API loop tells the profiler when each batch's data is asked for
(``batch_start``), when it arrived (``data_ready``, optional) and when its step ended
(``step_end``), and how long a checkpoint held training up (``checkpoint_blocked``); the
profiler reports their means in its ``timings`` group, as it does for the Keras engine and
the PyTorch Trainer (within ``profiling.begin_on_batch .. end_after_batch``). Each call
is a clock read; with the profiler off, or off the chief, nothing::

    for step in range(steps):
        core_context.profiler.batch_start()
        batch = next(batches)
        core_context.profiler.data_ready()
        train_step(batch)
        core_context.profiler.step_end()

>>> import tempfile
>>> from det_sdk.core import init
>>> with init(config={"profiling": {"enabled": False}}, runs_dir=tempfile.mkdtemp()) as ctx:
...     ctx.profiler.on(sampling_interval=1, samples_per_report=5)
...     ctx.profiler.is_on
...     ctx.profiler.batch_start(); ctx.profiler.data_ready(); ctx.profiler.step_end()
...     ctx.profiler.off()
...     ctx.profiler.is_on
True
False
"""

from __future__ import annotations

import numbers
from typing import Any

from det_sdk.errors import UsageError
from det_sdk.profiler import BatchTimer, Rate, start_profiler

__all__ = ["ProfilerContext"]


class ProfilerContext:
    """Turns the system metrics profiler on and off (Determined 0.38's names)."""

    def __init__(self, session: Any, distributed: Any) -> None:
        self._session = session
        self._distributed = distributed

    @property
    def is_on(self) -> bool:
        """det_sdk extension: whether the sampler runs in this process."""
        return self._session.profiler is not None

    def on(self, sampling_interval: float = 1, samples_per_report: int = 10) -> None:
        """Sample every ``sampling_interval`` seconds (at least 0.1) and report the mean
        of every ``samples_per_report`` samples; restarts a running sampler at that rate.
        Nothing in processes other than the chief."""
        if isinstance(sampling_interval, bool) or not isinstance(sampling_interval,
                                                                 (int, float)) \
                or not sampling_interval >= 0.1:
            raise UsageError(f"profiler.on: sampling_interval must be a number of seconds "
                             f">= 0.1, got {sampling_interval!r}")
        if isinstance(samples_per_report, bool) or not isinstance(samples_per_report, int) \
                or samples_per_report < 1:
            raise UsageError(f"profiler.on: samples_per_report must be an int >= 1, got "
                             f"{samples_per_report!r}")
        if not self._distributed.is_chief:
            return
        self._session.stop_profiler()
        start_profiler(self._session, {"enabled": True},
                       rate=Rate(float(sampling_interval), samples_per_report))

    def off(self) -> None:
        """Stop sampling (what was sampled is reported first)."""
        self._session.stop_profiler()

    # --- per-batch timings (det_sdk extension) -----------------------------------------

    def _timer(self) -> BatchTimer | None:
        profiler = self._session.profiler  # on() replaces it: asked anew at each call
        return profiler.timer if profiler is not None else None

    def batch_start(self) -> None:
        """det_sdk extension: a batch begins, its data is asked for now."""
        timer = self._timer()
        if timer is not None:
            timer.batch_start()

    def data_ready(self) -> None:
        """det_sdk extension: the batch's data arrived, its step begins (optional: without
        it the wait counts in the step)."""
        timer = self._timer()
        if timer is not None:
            timer.data_ready()

    def step_end(self) -> None:
        """det_sdk extension: the batch's step ended (the batch is counted)."""
        timer = self._timer()
        if timer is not None:
            timer.step_end()

    def checkpoint_blocked(self, seconds: float) -> None:
        """det_sdk extension: training waited ``seconds`` for a checkpoint."""
        if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real) \
                or not 0 <= seconds < float("inf"):
            raise UsageError(f"profiler.checkpoint_blocked: seconds must be a number >= 0, "
                             f"got {seconds!r}")
        timer = self._timer()
        if timer is not None:
            timer.checkpoint_blocked(float(seconds))
