"""Searchers: which hyperparameters each trial of an experiment gets.

``single`` (and no searcher) is one trial of the constants; ``grid`` is the product
of every hyperparameter's points (every leaf's, in nested groups); ``random`` draws
``max_trials`` points from a generator seeded by the experiment seed, so the same
config gives the same trials.

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
    MAX_TRIALS,
    AdaptiveASHASearcher,
    CategoricalHP,
    ConstHP,
    DoubleHP,
    ExperimentConfig,
    IntHP,
    LogHP,
    RandomSearcher,
    hp_leaves,
    hp_nest,
)
from det_sdk.errors import ArgumentTypeError, UsageError
from det_sdk.wire import metric_rank

__all__ = ["brackets", "initial_trials", "promotes", "rung_lengths"]

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


def _grid_size(spec: Any) -> int:
    """How many points ``_grid_points`` gives, without building them.

    >>> _grid_size(IntHP(type="int", minval=0, maxval=10**9, count=5))
    5
    """
    if isinstance(spec, ConstHP):
        return 1
    if isinstance(spec, CategoricalHP):
        return len(spec.vals)
    count = spec.count or _DEFAULT_GRID_COUNT
    if isinstance(spec, IntHP):
        return min(count, spec.maxval - spec.minval + 1)
    return count


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
    raise ArgumentTypeError(f"unknown hyperparameter kind {spec!r}")


def _dotted(path: tuple[str, ...]) -> str:
    return ".".join(path)


def initial_trials(config: ExperimentConfig, seed: int) -> list[dict[str, Any]]:
    """The hyperparameters of every trial the searcher starts with.

    Nested groups (Determined's nested hyperparameters) are searched leaf by leaf: the
    grid is the product over every leaf, a random point draws each leaf in turn (depth
    first, in the config's order), and each trial gets a nested dict of values.

    >>> from det_sdk.config import parse_experiment_config
    >>> cfg = parse_experiment_config({"hyperparameters": {"bs": 32, "opt": {
    ...     "name": {"type": "categorical", "vals": ["sgd", "adam"]}, "m": 0.9}},
    ...     "searcher": {"name": "grid"}})
    >>> initial_trials(cfg, seed=0)
    [{'bs': 32, 'opt': {'name': 'sgd', 'm': 0.9}}, {'bs': 32, 'opt': {'name': 'adam', 'm': 0.9}}]
    """
    leaves = list(hp_leaves(config.hyperparameters))
    name = config.searcher.name if config.searcher else "single"
    if name == "single":
        # one trial; a ranged hyperparameter is sampled once, as Determined's single
        # searcher does (the same draw as the first trial of a random search)
        rng = random.Random(seed)
        return [hp_nest((p, _random_point(v, rng)) for p, v in leaves)]
    if name == "grid":
        # counted before anything is built: a grid of 10**7 is refused at once
        total = math.prod(_grid_size(v) for _, v in leaves)
        if total > MAX_TRIALS:
            sizes = ", ".join(f"{_dotted(p)}: {_grid_size(v)}" for p, v in leaves)
            raise UsageError(f"grid search would create {total} trials (limit {MAX_TRIALS}; points "
                             f"per hyperparameter: {sizes})")
        paths = [p for p, _ in leaves]
        points = [_grid_points(v) for _, v in leaves]
        return [hp_nest(zip(paths, combo)) for combo in itertools.product(*points)]
    if name in ("random", "adaptive_asha"):
        rng = random.Random(seed)
        # these names are a RandomSearcher's or an AdaptiveASHASearcher's: both have max_trials
        assert isinstance(config.searcher, (RandomSearcher, AdaptiveASHASearcher))
        n = config.searcher.max_trials
        return [hp_nest((p, _random_point(v, rng)) for p, v in leaves) for _ in range(n)]
    raise UsageError(f"unknown searcher {name!r}")


# --- searcher operations: how long each trial trains -------------------------------------
#
# A trial is told "train to length L, then report the searcher metric"; when it
# reports, the searcher answers with the next length or "done". single, grid and
# random give one operation: max_length. adaptive_asha gives the rungs of the
# trial's bracket one after another while the trial stays in the top 1/divisor.


_ASHA_EXAMPLE = ExperimentConfig.model_validate({
    "hyperparameters": {"lr": {"type": "double", "minval": 0, "maxval": 1}},
    "searcher": {"name": "adaptive_asha", "max_length": {"epochs": 8}, "max_trials": 6,
                 "divisor": 2, "num_rungs": 4}})


def _n_rungs(searcher: AdaptiveASHASearcher) -> int:
    return min(searcher.num_rungs, searcher.max_rungs or searcher.num_rungs)


def _n_brackets(searcher: AdaptiveASHASearcher) -> int:
    rungs = _n_rungs(searcher)
    return {"aggressive": 1, "standard": math.ceil(rungs / 2), "conservative": rungs}[
        searcher.mode]


def brackets(config: ExperimentConfig, n_trials: int) -> list[int]:
    """The bracket of each trial, in creation order (all 0 but for adaptive_asha).

    Bracket ``b`` starts its trials at rung ``b``. Earlier (more aggressive)
    brackets get ``divisor`` times as many trials as the next one, interleaved
    so that any prefix of the trials is spread the same way.

    >>> brackets(_ASHA_EXAMPLE, 6)  # mode standard, 4 rungs: 2 brackets
    [0, 1, 0, 0, 1, 0]
    """
    searcher = config.searcher
    if not isinstance(searcher, AdaptiveASHASearcher):
        return [0] * n_trials
    n = _n_brackets(searcher)
    weights = [searcher.divisor ** (n - 1 - b) for b in range(n)]
    counts = [0] * n
    out = []
    for _ in range(n_trials):
        b = min(range(n), key=lambda i: (counts[i] / weights[i], i))
        counts[b] += 1
        out.append(b)
    return out


def rung_lengths(config: ExperimentConfig, bracket: int = 0) -> list[int]:
    """The lengths (in the searcher's unit) a trial of ``bracket`` trains to, in order.

    >>> rung_lengths(_ASHA_EXAMPLE), rung_lengths(_ASHA_EXAMPLE, bracket=1)
    ([1, 2, 4, 8], [2, 4, 8])
    """
    searcher = config.searcher
    if isinstance(searcher, AdaptiveASHASearcher):
        top = searcher.budget  # max_length, or max_time in time_metric's units
    elif searcher is None or searcher.max_length is None:
        return []
    else:
        return [searcher.max_length.value]
    n = _n_rungs(searcher)
    ladder = sorted({max(1, math.ceil(top / searcher.divisor ** (n - 1 - k))) for k in range(n)})
    return ladder[min(bracket, len(ladder) - 1):]


def promotes(results: list[tuple[int, float]], trial_id: int, divisor: int,
             smaller_is_better: bool) -> bool:
    """Whether ``trial_id`` goes on from a rung, given the rung's results so far.

    ``results`` are (trial id, metric) in the order they arrived, ``trial_id``'s
    among them. A trial goes on if it ranks among the best ``max(1, n // divisor)``
    of the ``n`` results so far (ties: the earlier arrival ranks first); the others
    stop for good ("stop once": a trial process never waits for later arrivals).
    The best trial seen at a rung therefore always goes on.

    A non-finite metric (NaN, +/-Infinity: a diverged trial) is the worst value in
    both directions (:func:`det_sdk.wire.metric_rank`): it ranks after every finite
    one, so it goes on only while no finite result beats it to a place (alone at a
    rung, say), and the trial that reported it still COMPLETES when it stops.

    >>> promotes([(1, 0.5), (2, 0.4)], 2, divisor=2, smaller_is_better=True)
    True
    >>> promotes([(1, 0.5), (2, 0.4), (3, 0.45)], 3, divisor=2, smaller_is_better=True)
    False
    >>> promotes([(1, 0.5), (2, float("-inf"))], 2, divisor=2, smaller_is_better=True)
    False
    >>> promotes([(1, 0.5), (2, float("inf"))], 2, divisor=2, smaller_is_better=False)
    False
    """
    def key(item: tuple[int, tuple[int, float]]) -> tuple[tuple[int, float], int]:
        order, (_, metric) = item
        return (metric_rank(metric, smaller_is_better), order)

    ranked = [tid for _, (tid, _m) in sorted(enumerate(results), key=key)]
    return ranked.index(trial_id) < max(1, len(results) // divisor)
