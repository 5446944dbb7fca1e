"""Experiment and job configs: the pydantic models that validate them, shared by SDK and master.

An experiment config is the YAML a user submits with ``det experiment create``
and, locally, the file given to ``det.keras.init(config=...)``. A job config is
the YAML of ``det job run``. Every field is checked here, once: unknown keys,
wrong types and missing required fields fail with the field's dotted path::

    >>> from det_sdk.config import parse_experiment_config
    >>> cfg = parse_experiment_config({"hyperparameters": {"dropout": 0.5},
    ...                                "entrypoint_script": "python3 train.py"})
    >>> cfg.hyperparameters["dropout"].val
    0.5
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    model_validator,
)

__all__ = [
    "CategoricalHP",
    "CheckpointStorageConfig",
    "ConfigError",
    "ConstHP",
    "DoubleHP",
    "ExperimentConfig",
    "Hyperparameter",
    "IntHP",
    "JobConfig",
    "Length",
    "LogHP",
    "load_yaml_file",
    "parse_experiment_config",
    "parse_job_config",
]


class ConfigError(ValueError):
    """A config that does not validate; the message names every bad field by its path."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# --- lengths -----------------------------------------------------------------------------


class Length(_Strict):
    """A training length: exactly one of ``epochs`` or ``batches``.

    >>> Length(epochs=2).epochs
    2
    """

    epochs: int | None = Field(default=None, ge=1)
    batches: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _exactly_one(self) -> Length:
        if (self.epochs is None) == (self.batches is None):
            raise ValueError("give exactly one of 'epochs' or 'batches'")
        return self

    @property
    def unit(self) -> Literal["epochs", "batches"]:
        return "epochs" if self.epochs is not None else "batches"

    @property
    def value(self) -> int:
        return self.epochs if self.epochs is not None else self.batches  # type: ignore[return-value]


# --- hyperparameters -----------------------------------------------------------------------


class ConstHP(_Strict):
    """A fixed value. In YAML a bare value (``dropout: 0.5``) means the same."""

    type: Literal["const"] = "const"
    val: Any


class IntHP(_Strict):
    """An integer range searched by the searcher; ``count`` points for grid search."""

    type: Literal["int"]
    minval: int
    maxval: int
    count: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> IntHP:
        if self.minval > self.maxval:
            raise ValueError(f"minval ({self.minval}) must not exceed maxval ({self.maxval})")
        return self


class DoubleHP(_Strict):
    """A real range searched by the searcher; ``count`` points for grid search."""

    type: Literal["double"]
    minval: float
    maxval: float
    count: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> DoubleHP:
        if self.minval > self.maxval:
            raise ValueError(f"minval ({self.minval}) must not exceed maxval ({self.maxval})")
        return self


class LogHP(_Strict):
    """``base ** x`` for x in [minval, maxval]: a log-scale range (learning rates)."""

    type: Literal["log"]
    minval: float
    maxval: float
    base: float = Field(default=10.0, gt=0)
    count: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> LogHP:
        if self.minval > self.maxval:
            raise ValueError(f"minval ({self.minval}) must not exceed maxval ({self.maxval})")
        return self


class CategoricalHP(_Strict):
    """One of a list of values."""

    type: Literal["categorical"]
    vals: list[Any] = Field(min_length=1)


Hyperparameter = Annotated[
    ConstHP | IntHP | DoubleHP | LogHP | CategoricalHP, Field(discriminator="type")
]
_HP_ADAPTER: TypeAdapter[Any] = TypeAdapter(Hyperparameter)


_RANGE_KEYS = {"minval", "maxval", "vals", "count", "base"}


def _parse_hyperparameters(raw: Any) -> Any:
    """Turn bare values into ``ConstHP`` so that YAML can say ``dropout: 0.5``."""
    if not isinstance(raw, Mapping):
        return raw  # let pydantic report the type error with its path
    out = {}
    for name, spec in raw.items():
        if isinstance(spec, Mapping) and "type" in spec:
            out[name] = spec
        elif isinstance(spec, Mapping) and _RANGE_KEYS & set(spec):
            # {minval: 1, maxval: 2} without a type is a forgotten type, not a constant
            out[name] = {"type": "<missing>", **spec}
        else:
            out[name] = {"type": "const", "val": spec}
    return out


# --- searchers -----------------------------------------------------------------------------


class _SearcherBase(_Strict):
    metric: str = "val_loss"
    smaller_is_better: bool = True
    max_length: Length | None = None
    max_concurrent_trials: int = Field(default=0, ge=0)


class SingleSearcher(_SearcherBase):
    """Train one trial with the config's (constant) hyperparameters."""

    name: Literal["single"]


class GridSearcher(_SearcherBase):
    """Every point of the grid of the hyperparameters (ranges take ``count`` points)."""

    name: Literal["grid"]


class RandomSearcher(_SearcherBase):
    """``max_trials`` random points, seeded by ``reproducibility.experiment_seed``."""

    name: Literal["random"]
    max_trials: int = Field(ge=1)


class AdaptiveASHASearcher(_SearcherBase):
    """Asynchronous successive halving: promote the top 1/divisor of each rung.

    Rung ``k`` of ``num_rungs`` (at most ``max_rungs``) trains to
    ``max_length / divisor**(num_rungs - 1 - k)``. ``mode`` sets how many brackets
    (trials that start at a later rung): aggressive 1, standard half the rungs,
    conservative one per rung. See ``det_sdk.master.searchers``.
    """

    name: Literal["adaptive_asha"]
    max_length: Length  # required: the rungs are fractions of it
    max_trials: int = Field(ge=1)
    num_rungs: int = Field(default=3, ge=1)
    divisor: int = Field(default=4, ge=2)
    mode: Literal["aggressive", "standard", "conservative"] = "standard"
    max_rungs: int | None = Field(default=None, ge=1)


Searcher = Annotated[
    SingleSearcher | GridSearcher | RandomSearcher | AdaptiveASHASearcher,
    Field(discriminator="name"),
]


# --- the rest of an experiment -----------------------------------------------------------


class CheckpointStorageConfig(_Strict):
    """Where checkpoints go and how many are kept."""

    type: Literal["shared_fs"] = "shared_fs"
    host_path: str | None = None
    save_trial_latest: int = Field(default=1, ge=0)
    save_trial_best: int = Field(default=1, ge=0)
    save_experiment_best: int = Field(default=0, ge=0)


class ExperimentResources(_Strict):
    slots_per_trial: int = Field(default=1, ge=1)


class Reproducibility(_Strict):
    experiment_seed: int | None = Field(default=None, ge=0, lt=2**31)


class ExperimentConfig(_Strict):
    """An experiment: hyperparameters, searcher, entrypoint and training policy.

    >>> cfg = ExperimentConfig.model_validate({"entrypoint": "python3 train.py"})
    >>> cfg.entrypoint_script
    'python3 train.py'
    """

    name: str | None = None
    description: str | None = None
    hyperparameters: dict[str, Hyperparameter] = Field(default_factory=dict)
    searcher: Searcher | None = None
    entrypoint_script: str | None = Field(
        default=None, validation_alias=AliasChoices("entrypoint_script", "entrypoint")
    )
    resources: ExperimentResources = Field(default_factory=ExperimentResources)
    min_validation_period: Length | None = None
    min_checkpoint_period: Length | None = None
    # batches between reports of the training metrics' running averages (Determined's name)
    scheduling_unit: int = Field(default=100, ge=1)
    checkpoint_storage: CheckpointStorageConfig = Field(default_factory=CheckpointStorageConfig)
    max_restarts: int = Field(default=5, ge=0)
    reproducibility: Reproducibility = Field(default_factory=Reproducibility)
    data: dict[str, Any] = Field(default_factory=dict)

    @property
    def searcher_metric(self) -> tuple[str, bool]:
        """``(metric, smaller_is_better)`` of the searcher; ``val_loss``, smaller, without one.

        >>> ExperimentConfig().searcher_metric
        ('val_loss', True)
        """
        if self.searcher is None:
            return "val_loss", True
        return self.searcher.metric, self.searcher.smaller_is_better

    @model_validator(mode="before")
    @classmethod
    def _bare_hparams(cls, raw: Any) -> Any:
        if isinstance(raw, Mapping) and "hyperparameters" in raw:
            raw = dict(raw)
            raw["hyperparameters"] = _parse_hyperparameters(raw["hyperparameters"])
        return raw


class JobResources(_Strict):
    slots: int = Field(default=1, ge=1)


class JobConfig(_Strict):
    """A generic job (``det job run``), e.g. batch inference.

    >>> JobConfig.model_validate({"entrypoint_script": "python3 bi.py"}).resources.slots
    1
    """

    name: str | None = None
    description: str | None = None
    entrypoint_script: str = Field(
        validation_alias=AliasChoices("entrypoint_script", "entrypoint")
    )
    resources: JobResources = Field(default_factory=JobResources)
    data: dict[str, Any] = Field(default_factory=dict)


# --- parsing helpers ----------------------------------------------------------------------


def format_validation_error(err: ValidationError, source: str = "config") -> str:
    """One line per problem, each naming the field by its dotted path."""
    lines = []
    for e in err.errors():
        loc = _user_path(e["loc"])
        path = ".".join(loc) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "union_tag_invalid" and e.get("ctx", {}).get("tag") == "<missing>":
            msg = ("has a range but no 'type'; give one of: int, double, log, categorical "
                   "(or write a constant as a plain value)")
        elif e["type"] == "extra_forbidden":
            msg = "unknown field"
        elif e["type"] == "missing":
            msg = "required field is missing"
        elif "input" in e and e["type"] != "value_error":
            msg = f"{msg} (got {e['input']!r})"
        lines.append(f"  {path}: {msg}")
    return f"invalid {source}:\n" + "\n".join(lines)


_HP_TAGS = {"const", "int", "double", "log", "categorical"}
_SEARCHER_TAGS = {"single", "grid", "random", "adaptive_asha"}


def _user_path(loc: tuple[Any, ...]) -> list[str]:
    """The path as the user wrote it: without the union tags pydantic inserts.

    Tags sit at known places (``searcher.<name>``, ``hyperparameters.<hp>.<type>``),
    so a user's key that happens to read like a tag ("log", "random") is kept.
    """
    out = []
    for i, part in enumerate(loc):
        if isinstance(part, str) and part.startswith("function-"):
            continue
        if i == 1 and loc[0] == "searcher" and part in _SEARCHER_TAGS:
            continue
        if i == 2 and loc[0] == "hyperparameters" and part in _HP_TAGS:
            continue
        out.append(str(part))
    return out


def _validate(model: type[BaseModel], raw: Any, source: str) -> Any:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"invalid {source}: expected a mapping at the top level, got "
                          f"{type(raw).__name__}")
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, source)) from None


def load_yaml_file(path: str | os.PathLike[str]) -> Any:
    """Read a YAML file, with errors that name the file."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {p}") from None
    except OSError as err:
        raise ConfigError(f"cannot read config file {p}: {err.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {p} is not valid YAML: {err}") from None


def parse_experiment_config(raw: Mapping[str, Any] | str | os.PathLike[str]) -> ExperimentConfig:
    """Validate an experiment config given as a mapping or a YAML file path.

    >>> parse_experiment_config({"hyperparameters": {"lr": {"type": "bogus"}}})
    Traceback (most recent call last):
    ...
    det_sdk.config.ConfigError: invalid experiment config:
      hyperparameters.lr: Input tag 'bogus' found using 'type' does not match ...
    """
    source = "experiment config"
    if isinstance(raw, (str, os.PathLike)):
        source = f"experiment config {raw}"
        raw = load_yaml_file(raw)
    return _validate(ExperimentConfig, raw, source)


def parse_job_config(raw: Mapping[str, Any] | str | os.PathLike[str]) -> JobConfig:
    """Validate a job config (``det job run``) given as a mapping or a YAML file path."""
    source = "job config"
    if isinstance(raw, (str, os.PathLike)):
        source = f"job config {raw}"
        raw = load_yaml_file(raw)
    return _validate(JobConfig, raw, source)
