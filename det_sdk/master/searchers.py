"""Searchers: which hyperparameters each trial of an experiment gets.

``single`` (and no searcher) is one trial of the constants; ``grid`` is the product
of every hyperparameter's points; ``random`` draws ``max_trials`` points from a
generator seeded by the experiment seed, so the same config gives the same trials.

>>> from det_sdk.config import parse_experiment_config
>>> cfg = parse_experiment_config({"hyperparameters": {
...     "lr": {"type": "categorical", "vals": [0.1, 0.01]}, "bs": 32},
...     "searcher": {"name": "grid"}})
>>> initial_trials(cfg, seed=0)
[{'lr': 0.1, 'bs': 32}, {'lr': 0.01, 'bs': 32}]
"""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

from det_sdk.config import (
    CategoricalHP,
    ConstHP,
    DoubleHP,
    ExperimentConfig,
    IntHP,
    LogHP,
)

__all__ = ["initial_trials"]

_DEFAULT_GRID_COUNT = 3


def _grid_points(spec: Any) -> list[Any]:
    if isinstance(spec, ConstHP):
        return [spec.val]
    if isinstance(spec, CategoricalHP):
        return list(spec.vals)
    count = spec.count or _DEFAULT_GRID_COUNT
    if isinstance(spec, IntHP):
        n = min(count, spec.maxval - spec.minval + 1)
        if n == 1:
            return [spec.minval]
        return sorted({round(spec.minval + i * (spec.maxval - spec.minval) / (n - 1))
                       for i in range(n)})
    lo, hi = spec.minval, spec.maxval
    xs = [lo] if count == 1 else [lo + i * (hi - lo) / (count - 1) for i in range(count)]
    if isinstance(spec, LogHP):
        return [spec.base**x for x in xs]
    return xs


def _random_point(spec: Any, rng: random.Random) -> Any:
    if isinstance(spec, ConstHP):
        return spec.val
    if isinstance(spec, CategoricalHP):
        return rng.choice(spec.vals)
    if isinstance(spec, IntHP):
        return rng.randint(spec.minval, spec.maxval)
    if isinstance(spec, DoubleHP):
        return rng.uniform(spec.minval, spec.maxval)
    if isinstance(spec, LogHP):
        return spec.base ** rng.uniform(spec.minval, spec.maxval)
    raise TypeError(f"unknown hyperparameter kind {spec!r}")


def initial_trials(config: ExperimentConfig, seed: int) -> list[dict[str, Any]]:
    """The hyperparameters of every trial the searcher starts with."""
    hps = config.hyperparameters
    name = config.searcher.name if config.searcher else "single"
    if name == "single":
        searched = [k for k, v in hps.items() if not isinstance(v, ConstHP)]
        if searched:
            raise ValueError(
                "searcher 'single' trains the constants only, but these hyperparameters "
                f"are searched: {', '.join(searched)}; use grid, random or adaptive_asha"
            )
        return [{k: v.val for k, v in hps.items()}]  # type: ignore[union-attr]
    if name == "grid":
        names = list(hps)
        points = [_grid_points(hps[k]) for k in names]
        total = math.prod(len(p) for p in points)
        if total > 10_000:
            raise ValueError(f"grid search would create {total} trials (limit 10000)")
        return [dict(zip(names, combo)) for combo in itertools.product(*points)]
    if name in ("random", "adaptive_asha"):
        rng = random.Random(seed)
        n = config.searcher.max_trials  # type: ignore[union-attr]
        return [{k: _random_point(v, rng) for k, v in hps.items()} for _ in range(n)]
    raise ValueError(f"unknown searcher {name!r}")
