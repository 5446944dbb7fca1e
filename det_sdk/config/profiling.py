"""The experiment config's ``profiling:`` section, as Determined 0.38 reads it.

Determined's fields: ``enabled`` (its default ``false``), ``begin_on_batch`` (0),
``end_after_batch`` (none: to the end) and ``sync_timings`` (``true``). det_sdk samples
system metrics by default at a low rate (:mod:`det_sdk.profiler`), so ``enabled`` left out
means that default; ``enabled: true`` samples at Determined's rate (every second) and
``enabled: false`` sends none.

>>> ProfilingConfig.model_validate({"enabled": True, "begin_on_batch": 2}).end_after_batch
>>> ProfilingConfig.model_validate({"begin_on_batch": 5, "end_after_batch": 3})
Traceback (most recent call last):
...
pydantic_core._pydantic_core.ValidationError: 1 validation error for ProfilingConfig
  Value error, profiling.end_after_batch (3) must be >= begin_on_batch (5) ...
"""

from __future__ import annotations

from typing import Annotated

from pydantic import model_validator

from det_sdk.config._base import MAX_LENGTH, ConfigError, _Strict, _within

__all__ = ["ProfilingConfig"]


class ProfilingConfig(_Strict):
    """``profiling:``: whether and when the profiler measures (Determined 0.38's fields)."""

    # None: not said; det_sdk's default (sampling at a low rate) applies
    enabled: bool | None = None
    begin_on_batch: Annotated[int, _within(0, MAX_LENGTH)] = 0
    end_after_batch: Annotated[int, _within(0, MAX_LENGTH)] | None = None
    # Determined's: wait for the GPU's queued work before a timing ends (torch.cuda.
    # synchronize), so a step's time is its work's, not its launch's
    sync_timings: bool = True

    @model_validator(mode="after")
    def _ordered(self) -> ProfilingConfig:
        if self.end_after_batch is not None and self.end_after_batch < self.begin_on_batch:
            raise ConfigError(f"profiling.end_after_batch ({self.end_after_batch}) must be >= "
                             f"begin_on_batch ({self.begin_on_batch})")
        return self
