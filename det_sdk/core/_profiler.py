"""``core_context.profiler``: Determined 0.38's ``ProfilerContext``, turning the system
metrics sampler (det_sdk.profiler) on and off by hand.

det_sdk's profiler already runs from the start at the config's rate (``profiling:``);
``on()`` restarts it at the rate given, ``off()`` stops it. Only the chief samples.

>>> import tempfile
>>> from det_sdk.core import init
>>> with init(config={"profiling": {"enabled": False}}, runs_dir=tempfile.mkdtemp()) as ctx:
...     ctx.profiler.on(sampling_interval=1, samples_per_report=5)
...     ctx.profiler.is_on
...     ctx.profiler.off()
...     ctx.profiler.is_on
True
False
"""

from __future__ import annotations

from typing import Any

from det_sdk.errors import UsageError
from det_sdk.profiler import Rate, start_profiler

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
