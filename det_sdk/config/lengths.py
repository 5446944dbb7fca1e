"""Training lengths: ``Length`` (epochs or batches), and the lengths Determined writes
(records, older releases' steps, the Core API's unitless integer) in det_sdk's units.

    >>> Length(batches=10).unit
    'batches'
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import model_validator

from det_sdk.config._base import MAX_LENGTH, ConfigError, _Strict, _within


class Length(_Strict):
    """A training length: exactly one of ``epochs`` or ``batches``.

    >>> Length(epochs=2).epochs
    2
    """

    epochs: Annotated[int, _within(1, MAX_LENGTH)] | None = None
    batches: Annotated[int, _within(1, MAX_LENGTH)] | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Length:
        if (self.epochs is None) == (self.batches is None):
            raise ConfigError("give exactly one of 'epochs' or 'batches'")
        return self

    @property
    def unit(self) -> Literal["epochs", "batches"]:
        return "epochs" if self.epochs is not None else "batches"

    @property
    def value(self) -> int:
        value = self.epochs if self.epochs is not None else self.batches
        assert value is not None  # exactly one is set (the validator)
        return value


def _const_global_batch_size(raw: Mapping[str, Any]) -> int | None:
    hps = raw.get("hyperparameters")
    gbs = hps.get("global_batch_size") if isinstance(hps, Mapping) else None
    if isinstance(gbs, Mapping) and gbs.get("type") == "const":
        gbs = gbs.get("val")
    return gbs if isinstance(gbs, int) and not isinstance(gbs, bool) and gbs > 0 else None


_LENGTH_FIELDS = (("searcher", "max_length"), ("min_validation_period",),
                  ("min_checkpoint_period",))


def _determined_lengths(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Lengths as Determined writes them, in det_sdk's units (epochs or batches).

    - ``{records: N}``: N records are ``ceil(N / global_batch_size)`` batches (the
      hyperparameter must then be a constant: a searched one gives each trial another
      length, which a searcher cannot compare);
    - older releases' steps (``searcher.max_steps: N``, ``min_validation_period: N``):
      a step is ``scheduling_unit`` batches (100 by default), as in the seed tutorial.
    """
    raw = dict(raw)
    unit = raw.get("scheduling_unit", 100)
    unit = unit if isinstance(unit, int) and not isinstance(unit, bool) and unit > 0 else 100
    searcher = raw.get("searcher")
    if isinstance(searcher, Mapping) and "max_steps" in searcher:
        searcher = dict(searcher)
        steps = searcher.pop("max_steps")
        if "max_length" in searcher:
            raise ConfigError("searcher: give max_length or the older max_steps, not both")
        searcher["max_length"] = ({"batches": steps * unit} if isinstance(steps, int)
                                  and not isinstance(steps, bool) else steps)
        raw["searcher"] = searcher
    if isinstance(searcher, Mapping) and isinstance(searcher.get("max_length"), int) \
            and not isinstance(searcher["max_length"], bool):
        # the Core API's unitless length: what the script counts; epochs for det_sdk's
        # fronts that need a unit (see _SearcherBase)
        n = searcher["max_length"]
        if not 1 <= n <= MAX_LENGTH:
            raise ConfigError("searcher.max_length: expected a positive integer (at most "
                              f"{MAX_LENGTH}) or one of {{epochs: N}}, {{batches: N}}, {{records: "
                              f"N}}, got {n}")
        raw["searcher"] = {**searcher, "max_length": {"epochs": n}}
    for name in ("min_validation_period", "min_checkpoint_period"):
        steps = raw.get(name)
        if isinstance(steps, int) and not isinstance(steps, bool):
            raw[name] = {"batches": steps * unit}
    for path in _LENGTH_FIELDS:
        parent: Any = raw if len(path) == 1 else raw.get(path[0])
        if not isinstance(parent, Mapping):
            continue
        length = parent.get(path[-1])
        if not isinstance(length, Mapping) or "records" not in length:
            continue
        where = ".".join(path)
        records = length["records"]
        if set(length) != {"records"}:
            raise ConfigError(f"{where}: give exactly one of 'epochs', 'batches' or 'records'")
        if isinstance(records, bool) or not isinstance(records, int) or records < 1:
            raise ConfigError(f"{where}.records: expected a positive integer, got {records!r}")
        gbs = _const_global_batch_size(raw)
        if gbs is None:
            raise ConfigError(
                f"{where}.records: counting records in batches needs a constant "
                "hyperparameters.global_batch_size (a positive integer); give the length "
                "in batches or epochs instead")
        converted = {"batches": math.ceil(records / gbs)}
        if len(path) == 1:
            raw[path[0]] = converted
        else:
            raw[path[0]] = {**parent, path[-1]: converted}
    return raw
