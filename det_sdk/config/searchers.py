"""Searchers: how many trials an experiment runs, with which hyperparameters, for how
long (single, grid, random, adaptive ASHA). The search itself is the master's
(``det_sdk.master.searchers``).

    >>> GridSearcher(name="grid").metric
    'val_loss'
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, Strict, model_validator

from det_sdk.config._base import (
    MAX_LENGTH,
    MAX_RUNGS,
    MAX_TRIALS,
    ConfigError,
    _Strict,
    _within,
)
from det_sdk.config.lengths import Length


class _SearcherBase(_Strict):
    """What every searcher takes.

    ``max_length`` is how long each trial trains, as Determined writes it:
    ``{epochs: N}``, ``{batches: N}``, ``{records: N}`` (with a constant
    ``global_batch_size``), or a plain integer ``N`` -- the Core API's unitless
    length. A unitless length reaches a Core API script as ``op.length == N``
    (the script gives it its meaning, as on Determined); ``context.fit`` and a
    TFKerasTrial, which need a unit, read it as **epochs** (Keras counts training
    in epochs: ``model.fit(epochs=N)``). It is stored as ``{epochs: N}``.
    """

    metric: str = "val_loss"
    smaller_is_better: Annotated[bool, Strict()] = True
    max_length: Length | None = None
    max_concurrent_trials: Annotated[int, _within(0, MAX_TRIALS)] = 0


class SingleSearcher(_SearcherBase):
    """Train one trial. A searched (ranged) hyperparameter is sampled once, seeded by
    ``reproducibility.experiment_seed``, as Determined's single searcher does."""

    name: Literal["single"]


class GridSearcher(_SearcherBase):
    """Every point of the grid of the hyperparameters (ranges take ``count`` points)."""

    name: Literal["grid"]


class RandomSearcher(_SearcherBase):
    """``max_trials`` random points, seeded by ``reproducibility.experiment_seed``."""

    name: Literal["random"]
    max_trials: Annotated[int, _within(1, MAX_TRIALS)]


class AdaptiveASHASearcher(_SearcherBase):
    """Asynchronous successive halving: promote the top 1/divisor of each rung.

    Rung ``k`` of ``num_rungs`` (at most ``max_rungs``) trains to
    ``max_length / divisor**(num_rungs - 1 - k)``. ``mode`` sets how many brackets
    (trials that start at a later rung): aggressive 1, standard half the rungs,
    conservative one per rung. See ``det_sdk.master.searchers``.
    """

    name: Literal["adaptive_asha"]
    # the rungs are fractions of the budget: max_length (Determined <= 0.37), or
    # Determined 0.38's time_metric + max_time -- the rungs then count the value of the
    # validation metric ``time_metric`` the script reports (e.g. ``batches``), and a
    # trial the searcher stops is told so through ``core_context.preempt``
    max_length: Length | None = None
    time_metric: str | None = Field(default=None, min_length=1, max_length=256)
    max_time: Annotated[int, _within(1, MAX_LENGTH)] | None = None
    max_trials: Annotated[int, _within(1, MAX_TRIALS)]
    num_rungs: Annotated[int, _within(1, MAX_RUNGS)] = 3
    divisor: Annotated[int, _within(2, 1000)] = 4
    mode: Literal["aggressive", "standard", "conservative"] = "standard"
    max_rungs: Annotated[int, _within(1, MAX_RUNGS)] | None = None

    @model_validator(mode="after")
    def _one_budget(self) -> AdaptiveASHASearcher:
        timed = (self.time_metric is not None, self.max_time is not None)
        if timed == (True, False) or timed == (False, True):
            given, missing = ("time_metric", "max_time") if timed[0] else ("max_time",
                                                                          "time_metric")
            raise ConfigError(f"searcher.{missing}: required with searcher.{given} (e.g. "
                              "time_metric: batches, max_time: 1000)")
        if timed[0] and self.max_length is not None:
            raise ConfigError("searcher: give max_length or time_metric + max_time, not both")
        if not timed[0] and self.max_length is None:
            raise ConfigError("searcher.max_length: adaptive_asha needs a budget: max_length "
                              "(e.g. max_length: {epochs: 8}) or time_metric + max_time (e.g. "
                              "time_metric: batches, max_time: 1000)")
        return self

    @property
    def budget(self) -> int:
        """The longest a trial trains: ``max_time``, else ``max_length``'s value."""
        if self.max_time is not None:
            return self.max_time
        assert self.max_length is not None  # the validator above requires one of the two
        return self.max_length.value


Searcher = Annotated[
    SingleSearcher | GridSearcher | RandomSearcher | AdaptiveASHASearcher,
    Field(discriminator="name"),
]
