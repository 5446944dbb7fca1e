"""What every config module builds on: ``ConfigError``, the strict base model, and the
limits every number of a config is checked against.

    >>> MAX_TRIALS
    10000
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from det_sdk.errors import DetSdkError


class ConfigError(DetSdkError, ValueError):
    """A config that does not validate; the message names every bad field by its path."""


# Its public home: tracebacks, doctests and the error tree (tests/e2e/test_errors.py) name it
# det_sdk.config.ConfigError, as before the config module became a package.
ConfigError.__module__ = "det_sdk.config"


class _Strict(BaseModel):
    # ser_json_inf_nan: a constant hyperparameter .nan/.inf (YAML 1.2) stays a float in
    # model_dump(mode="json") (the stored config, the trial's) instead of None, and
    # answers as "NaN"/"Infinity"/"-Infinity" in JSON, as metrics do (det_sdk.wire)
    model_config = ConfigDict(extra="forbid", populate_by_name=True,
                              ser_json_inf_nan="strings")


# --- limits ---------------------------------------------------------------------------------
#
# Every number a config holds is bounded, and checked before anything is built from it:
# a search of 10**7 trials, a billion rungs or an epoch count of 1e30 is refused with
# its field, not computed (a master must never hang or run out of memory on a config).

MAX_TRIALS = 10_000  # trials of one experiment (grid points, max_trials)
MAX_RUNGS = 32  # ASHA rungs: divisor**32 already exceeds any training length
MAX_LENGTH = 2**40  # epochs or batches of one trial
MAX_INT = 2**62  # integer hyperparameter bounds (kept within SQLite's 64 bits)
# The whole config travels to each trial in one environment variable (DET_EXPERIMENT_
# CONFIG); Linux refuses a single variable over 128 KiB ("Argument list too long").
MAX_CONFIG_BYTES = 96 * 1024


def _no_bool(v: Any) -> Any:
    # YAML's `true` is not 1: a boolean where a number belongs is a mistake
    if isinstance(v, bool):
        raise ConfigError("expected a number, not a boolean")
    return v


def _within(lo: int, hi: int) -> Any:
    """An int field's metadata: strict (no bool, no "5", no 1.0) and within [lo, hi].
    Written ``Annotated[int, _within(lo, hi)]`` so that type checkers see an int."""
    return Field(strict=True, ge=lo, le=hi)


Real = Annotated[float, BeforeValidator(_no_bool), Field(allow_inf_nan=False)]


def _entrypoint_ok(v: str | None) -> str | None:
    if v is not None and "\x00" in v:
        raise ConfigError("contains a NUL character, which no command line can hold")
    return v


def _check_size(model: BaseModel) -> None:
    """Refuse a config too large for the environment variable that carries it to tasks."""
    dumped = model.model_dump(mode="json")
    size = len(json.dumps(dumped, default=str))
    if size > MAX_CONFIG_BYTES:
        largest = sorted(((len(json.dumps(v, default=str)), k) for k, v in dumped.items()),
                         reverse=True)[:2]
        names = ", ".join(f"{k} ({n} bytes)" for n, k in largest)
        raise ConfigError(
            f"the config is {size} bytes as JSON, over the limit of {MAX_CONFIG_BYTES} (it "
            f"reaches each task in one environment variable); largest fields: {names}. "
            f"Keep data sets and long texts in files of the model directory")
