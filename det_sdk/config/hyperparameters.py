"""Hyperparameters: constants and searched ranges (``HPSpec``), nested groups
(``Hyperparameter``), and the walk between a nested mapping and its leaves.

    >>> IntHP(type="int", minval=1, maxval=4).maxval
    4
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Discriminator, Field, Tag, TypeAdapter, model_validator
from typing_extensions import TypeAliasType

from det_sdk.config._base import MAX_INT, MAX_TRIALS, ConfigError, Real, _Strict, _within


class ConstHP(_Strict):
    """A fixed value. In YAML a bare value (``dropout: 0.5``) means the same."""

    type: Literal["const"] = "const"
    val: Any


class IntHP(_Strict):
    """An integer range searched by the searcher; ``count`` points for grid search."""

    type: Literal["int"]
    minval: Annotated[int, _within(-MAX_INT, MAX_INT)]
    maxval: Annotated[int, _within(-MAX_INT, MAX_INT)]
    count: Annotated[int, _within(1, MAX_TRIALS)] | None = None

    @model_validator(mode="after")
    def _ordered(self) -> IntHP:
        if self.minval > self.maxval:
            raise ConfigError(f"minval ({self.minval}) must not exceed maxval ({self.maxval})")
        return self


class DoubleHP(_Strict):
    """A real range searched by the searcher; ``count`` points for grid search."""

    type: Literal["double"]
    minval: Real
    maxval: Real
    count: Annotated[int, _within(1, MAX_TRIALS)] | None = None

    @model_validator(mode="after")
    def _ordered(self) -> DoubleHP:
        if self.minval > self.maxval:
            raise ConfigError(f"minval ({self.minval}) must not exceed maxval ({self.maxval})")
        return self


class LogHP(_Strict):
    """``base ** x`` for x in [minval, maxval]: a log-scale range (learning rates)."""

    type: Literal["log"]
    minval: Real
    maxval: Real
    base: Annotated[Real, Field(gt=0)] = 10.0
    count: Annotated[int, _within(1, MAX_TRIALS)] | None = None

    @model_validator(mode="after")
    def _ordered(self) -> LogHP:
        if self.minval > self.maxval:
            raise ConfigError(f"minval ({self.minval}) must not exceed maxval ({self.maxval})")
        for bound in (self.minval, self.maxval):
            try:
                value = self.base**bound
            except OverflowError:
                value = math.inf
            if not math.isfinite(value) or value == 0:
                raise ConfigError(f"base ** {bound} ({self.base} ** {bound}) is out of a float's "
                                  "range; a log range spans exponents, e.g. minval: -5, maxval: -1")
        return self


class CategoricalHP(_Strict):
    """One of a list of values."""

    type: Literal["categorical"]
    vals: list[Any] = Field(min_length=1)


HPSpec = Annotated[
    ConstHP | IntHP | DoubleHP | LogHP | CategoricalHP, Field(discriminator="type")
]
"""One hyperparameter's spec (a leaf): a constant or a searched range."""
_HP_ADAPTER: TypeAdapter[Any] = TypeAdapter(HPSpec)

MAX_HP_DEPTH = 8  # levels of nested hyperparameter groups below ``hyperparameters``
_GROUP = "group"  # the union tag of a nested group (a mapping without ``type``)


def _hp_kind(v: Any) -> str | None:
    """Which member of ``Hyperparameter`` a value is: its ``type``, or a nested group."""
    if isinstance(v, BaseModel):
        return getattr(v, "type", None)
    if isinstance(v, Mapping):
        if "type" not in v:
            return _GROUP
        kind = v["type"]
        return kind if isinstance(kind, str) else repr(kind)
    return None


# (ignores: mypy cannot express pydantic's recursive TypeAliasType; pydantic checks it)
Hyperparameter = TypeAliasType(  # type: ignore[misc]
    "Hyperparameter",
    Annotated[
        Annotated[ConstHP, Tag("const")] | Annotated[IntHP, Tag("int")]
        | Annotated[DoubleHP, Tag("double")] | Annotated[LogHP, Tag("log")]
        | Annotated[CategoricalHP, Tag("categorical")]
        | Annotated[dict[str, "Hyperparameter"], Tag(_GROUP)],  # type: ignore[misc]
        Discriminator(_hp_kind),
    ],
)
"""A hyperparameter: a spec (``HPSpec``), or a nested group, a mapping of hyperparameters
(Determined's nested hyperparameters: searched leaf by leaf, the trial gets a nested dict)."""


_RANGE_KEYS = {"minval", "maxval", "vals", "count", "base"}


def _parse_hyperparameters(raw: Any, path: str = "hyperparameters", depth: int = 0) -> Any:
    """Turn bare values into ``ConstHP`` so that YAML can say ``dropout: 0.5``.

    As in Determined, a mapping with ``type`` is a spec; a non-empty mapping without
    ``type`` is a nested group of hyperparameters, parsed the same way (at most
    ``MAX_HP_DEPTH`` levels); any other value (an empty mapping included) is a constant.

    >>> _parse_hyperparameters({"opt": {"lr": 0.1, "m": {"type": "int", "minval": 1,
    ...                                                   "maxval": 2}}})
    {'opt': {'lr': {'type': 'const', 'val': 0.1}, 'm': {'type': 'int', 'minval': 1, 'maxval': 2}}}
    """
    if not isinstance(raw, Mapping):
        return raw  # let pydantic report the type error with its path
    if depth > MAX_HP_DEPTH:
        raise ConfigError(f"{path}: hyperparameter groups nested more than {MAX_HP_DEPTH} levels "
                          "deep")
    out = {}
    for name, spec in raw.items():
        if isinstance(spec, Mapping) and "type" in spec:
            out[name] = spec
        elif isinstance(spec, Mapping) and _RANGE_KEYS & set(spec):
            # {minval: 1, maxval: 2} without a type is a forgotten type, not a constant
            out[name] = {"type": "<missing>", **spec}
        elif isinstance(spec, Mapping) and spec:
            out[name] = _parse_hyperparameters(spec, f"{path}.{name}", depth + 1)
        else:
            out[name] = {"type": "const", "val": spec}
    return out


def hp_leaves(hps: Mapping[str, Any],
              prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], HPSpec]]:
    """Every spec of a (nested) hyperparameters mapping with its path, depth first.

    >>> from det_sdk.config import parse_experiment_config
    >>> cfg = parse_experiment_config({"hyperparameters": {"bs": 32, "opt": {"lr": 0.1}}})
    >>> [(path, spec.val) for path, spec in hp_leaves(cfg.hyperparameters)]
    [(('bs',), 32), (('opt', 'lr'), 0.1)]
    """
    for name, spec in hps.items():
        if isinstance(spec, Mapping):
            yield from hp_leaves(spec, (*prefix, name))
        else:
            yield (*prefix, name), spec


def hp_nest(leaves: Iterable[tuple[tuple[str, ...], Any]]) -> dict[str, Any]:
    """The nested dict of values from ``(path, value)`` pairs (``hp_leaves``' paths).

    >>> hp_nest([(("bs",), 32), (("opt", "lr"), 0.1), (("opt", "m"), 0.9)])
    {'bs': 32, 'opt': {'lr': 0.1, 'm': 0.9}}
    """
    out: dict[str, Any] = {}
    for path, value in leaves:
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return out
