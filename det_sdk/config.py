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

import difflib
import json
import logging
import math
import os
import re
import shlex
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Strict,
    Tag,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from typing_extensions import TypeAliasType

from det_sdk.errors import DetSdkError

__all__ = [
    "IGNORED_DETERMINED_FIELDS",
    "MAX_CONFIG_BYTES",
    "MAX_HP_DEPTH",
    "MAX_LENGTH",
    "MAX_RUNGS",
    "MAX_TRIALS",
    "OWNED_ENV_NAMES",
    "TRIAL_RUNNER",
    "CategoricalHP",
    "CheckpointStorageConfig",
    "ConfigError",
    "ConstHP",
    "DoubleHP",
    "EnvironmentConfig",
    "ExperimentConfig",
    "HPSpec",
    "Hyperparameter",
    "IntHP",
    "JobConfig",
    "Length",
    "LogHP",
    "apply_environment_variables",
    "entrypoint_runs_of",
    "environment_variables",
    "hp_leaves",
    "hp_nest",
    "ignored_fields",
    "ignored_fields_warning",
    "launch_warnings",
    "load_yaml_file",
    "load_yaml_text",
    "parse_experiment_config",
    "parse_job_config",
    "resolve_host_path",
    "trial_class_command",
]


log = logging.getLogger("det_sdk.config")


class ConfigError(DetSdkError, ValueError):
    """A config that does not validate; the message names every bad field by its path."""


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


def _bounded_int(lo: int, hi: int) -> Any:
    return Annotated[int, Strict(), Field(ge=lo, le=hi)]


Real = Annotated[float, BeforeValidator(_no_bool), Field(allow_inf_nan=False)]


# --- lengths -----------------------------------------------------------------------------


class Length(_Strict):
    """A training length: exactly one of ``epochs`` or ``batches``.

    >>> Length(epochs=2).epochs
    2
    """

    epochs: _bounded_int(1, MAX_LENGTH) | None = None  # type: ignore[valid-type]
    batches: _bounded_int(1, MAX_LENGTH) | None = None  # type: ignore[valid-type]

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
        return self.epochs if self.epochs is not None else self.batches  # type: ignore[return-value]


# --- hyperparameters -----------------------------------------------------------------------


class ConstHP(_Strict):
    """A fixed value. In YAML a bare value (``dropout: 0.5``) means the same."""

    type: Literal["const"] = "const"
    val: Any


class IntHP(_Strict):
    """An integer range searched by the searcher; ``count`` points for grid search."""

    type: Literal["int"]
    minval: _bounded_int(-MAX_INT, MAX_INT)  # type: ignore[valid-type]
    maxval: _bounded_int(-MAX_INT, MAX_INT)  # type: ignore[valid-type]
    count: _bounded_int(1, MAX_TRIALS) | None = None  # type: ignore[valid-type]

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
    count: _bounded_int(1, MAX_TRIALS) | None = None  # type: ignore[valid-type]

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
    count: _bounded_int(1, MAX_TRIALS) | None = None  # type: ignore[valid-type]

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


Hyperparameter = TypeAliasType(  # type: ignore[misc]
    "Hyperparameter",
    Annotated[
        Annotated[ConstHP, Tag("const")] | Annotated[IntHP, Tag("int")]
        | Annotated[DoubleHP, Tag("double")] | Annotated[LogHP, Tag("log")]
        | Annotated[CategoricalHP, Tag("categorical")]
        | Annotated[dict[str, "Hyperparameter"], Tag(_GROUP)],
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


# --- searchers -----------------------------------------------------------------------------


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
    max_concurrent_trials: _bounded_int(0, MAX_TRIALS) = 0  # type: ignore[valid-type]


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
    max_trials: _bounded_int(1, MAX_TRIALS)  # type: ignore[valid-type]


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
    max_time: _bounded_int(1, MAX_LENGTH) | None = None  # type: ignore[valid-type]
    max_trials: _bounded_int(1, MAX_TRIALS)  # type: ignore[valid-type]
    num_rungs: _bounded_int(1, MAX_RUNGS) = 3  # type: ignore[valid-type]
    divisor: _bounded_int(2, 1000) = 4  # type: ignore[valid-type]
    mode: Literal["aggressive", "standard", "conservative"] = "standard"
    max_rungs: _bounded_int(1, MAX_RUNGS) | None = None  # type: ignore[valid-type]

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
        return self.max_time if self.max_time is not None else self.max_length.value  # type: ignore[union-attr,return-value]


Searcher = Annotated[
    SingleSearcher | GridSearcher | RandomSearcher | AdaptiveASHASearcher,
    Field(discriminator="name"),
]


# --- the rest of an experiment -----------------------------------------------------------


class CheckpointStorageConfig(_Strict):
    """Where checkpoints go and how many are kept."""

    type: Literal["shared_fs"] = "shared_fs"
    host_path: str | None = None
    save_trial_latest: _bounded_int(0, 1_000_000) = 1  # type: ignore[valid-type]
    save_trial_best: _bounded_int(0, 1_000_000) = 1  # type: ignore[valid-type]
    save_experiment_best: _bounded_int(0, 1_000_000) = 0  # type: ignore[valid-type]

    def check_absolute(self) -> None:
        """Refuse a relative ``host_path`` (:class:`ConfigError`): on a master it would
        resolve against each trial's working directory, deleted when the trial ends,
        and every checkpoint with it. The master calls this at experiment create;
        ``det experiment create`` first resolves a relative path against the config
        file's directory (:func:`resolve_host_path`). Local runs keep their
        checkpoints under the run's directory and do not use ``host_path``.

        >>> CheckpointStorageConfig(host_path="ckpts").check_absolute()
        Traceback (most recent call last):
        ...
        det_sdk.config.ConfigError: checkpoint_storage.host_path: 'ckpts' is a relative path; ...
        """
        path = self.host_path
        if path is not None and not os.path.isabs(path):
            raise ConfigError(
                f"checkpoint_storage.host_path: {path!r} is a relative path; write an "
                "absolute path (a relative one would resolve against each trial's working "
                "directory, which is deleted when the trial ends, and its checkpoints with "
                "it). `det experiment create` resolves a relative host_path against the "
                "config file's directory")


def resolve_host_path(raw: Mapping[str, Any], config_dir: str | os.PathLike[str]
                      ) -> tuple[dict[str, Any], str | None]:
    """``raw`` with a relative ``checkpoint_storage.host_path`` (``~`` expanded) made
    absolute against ``config_dir`` (the config file's directory), and the new path
    (None where nothing changed). Anything that is not a string is left to validation.

    >>> resolve_host_path({"checkpoint_storage": {"host_path": "ckpts"}}, "/exp")
    ({'checkpoint_storage': {'host_path': '/exp/ckpts'}}, '/exp/ckpts')
    """
    storage = raw.get("checkpoint_storage")
    path = storage.get("host_path") if isinstance(storage, Mapping) else None
    if not isinstance(path, str) or not path or os.path.isabs(path):
        return dict(raw), None
    resolved = os.path.normpath(os.path.join(os.path.abspath(config_dir),
                                             os.path.expanduser(path)))
    return {**raw, "checkpoint_storage": {**storage, "host_path": resolved}}, resolved


# --- environment variables (Determined's environment.environment_variables) ----------------

#: Names det_sdk sets for every task's processes, which a config cannot set: ``DET_*`` (the
#: master's address, the task token, the trial's description), ``HOROVOD_*`` (the ranks'
#: rendezvous), ``SLURM_*``/``SLURMD_*`` (``srun`` reads its options from them) and
#: ``PATH`` (``python3`` in an entrypoint must be det_sdk's interpreter).
OWNED_ENV_NAMES = re.compile(r"(?:DET_|HOROVOD_|SLURM_|SLURMD_)\w*|PATH")


_DEVICES = ("cpu", "cuda", "rocm")


def _env_entries(raw: Any, where: str) -> list[str]:
    """Check a list of ``NAME=value`` entries; ``where`` names it in errors."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ConfigError(f"{where}expected a list of 'NAME=value' strings, got {raw!r}")
    for i, entry in enumerate(raw):
        if not isinstance(entry, str):
            raise ConfigError(f"{where}entry {i}: expected a 'NAME=value' string, got {entry!r}")
        name, eq, _ = entry.partition("=")
        if not eq:
            raise ConfigError(f"{where}entry {i} {entry!r} has no '=': expected 'NAME=value'")
        if not name.strip():
            raise ConfigError(f"{where}entry {i} {entry!r} has an empty name: expected "
                             "'NAME=value'")
        if "\x00" in entry or any(c.isspace() for c in name):
            raise ConfigError(f"{where}entry {i} {entry!r}: a name holds no spaces, and no entry a "
                              "NUL character")
        if OWNED_ENV_NAMES.fullmatch(name):
            raise ConfigError(f"{where}entry {i}: {name} is set by det_sdk for every task and "
                              "cannot be overridden (DET_*, HOROVOD_*, SLURM_*, PATH)")
    return list(raw)


def _env_section(raw: Any) -> Any:
    """A list of entries, or Determined's per-device mapping (``gpu``: ``cuda``'s old name)."""
    if isinstance(raw, BaseModel):
        raw = raw.model_dump()
    if not isinstance(raw, Mapping):
        return _env_entries(raw, "")
    unknown = [k for k in raw if k not in (*_DEVICES, "gpu")]
    if unknown:
        raise ConfigError(f"unknown device {unknown[0]!r}: expected a list of 'NAME=value' "
                          f"strings, or a mapping of {', '.join(_DEVICES)} to such lists")
    if "gpu" in raw and "cuda" in raw:
        raise ConfigError("give 'cuda' or its older name 'gpu', not both")
    return {d: _env_entries(raw.get(d, raw.get("gpu") if d == "cuda" else None), f"{d}: ")
            for d in _DEVICES}


class EnvironmentConfig(_Strict):
    """Determined's ``environment``: det_sdk implements ``environment_variables``.

    ``environment_variables`` is a list of ``NAME=value`` strings, or Determined's
    per-device mapping ``{cpu: [...], cuda: [...], rocm: [...]}``. det_sdk's slots are
    CPU processes: of the mapping, ``cpu`` applies; ``cuda`` (or its older name ``gpu``)
    and ``rocm`` are checked the same way and not applied (the config's warning says
    so). Later entries of a name win. Determined's other fields here (``image``,
    ``pod_spec``, ...) are accepted with a warning and ignored.

    >>> EnvironmentConfig.model_validate({"environment_variables": ["A=1", "B=x=y"]}).variables
    {'A': '1', 'B': 'x=y'}
    >>> EnvironmentConfig.model_validate(
    ...     {"environment_variables": {"cpu": ["A=1"], "cuda": ["A=2"]}}).variables
    {'A': '1'}
    """

    environment_variables: list[str] | dict[str, list[str]] = Field(default_factory=list)

    _entries = field_validator("environment_variables", mode="before")(_env_section)

    @property
    def variables(self) -> dict[str, str]:
        """The variables a task's processes get (of the mapping form, ``cpu``'s)."""
        entries = self.environment_variables
        if isinstance(entries, dict):
            entries = entries["cpu"]
        return dict(e.partition("=")[::2] for e in entries)


def environment_variables(config: Mapping[str, Any] | None) -> dict[str, str]:
    """The ``environment.environment_variables`` of a config (as stored: a mapping).

    >>> environment_variables({"environment": {"environment_variables": ["DATA=/d"]}})
    {'DATA': '/d'}
    >>> environment_variables({})
    {}
    """
    section = (config or {}).get("environment")
    if not isinstance(section, Mapping):
        return {}
    section = {k: v for k, v in section.items() if k == "environment_variables"}
    try:
        return EnvironmentConfig.model_validate(section).variables
    except ValidationError as err:  # checked at create: only a config altered since
        raise ConfigError(format_validation_error(err, "config's environment")) from None


def apply_environment_variables(config: ExperimentConfig | JobConfig | None,
                                environ: Any = None) -> dict[str, str]:
    """A local run's ``environment_variables``, set where the shell has not set them.

    The shell wins (as ``docker run -e`` over an image's ENV): a variable already in the
    environment is kept. Returns what was set. On the cluster the master sets them
    before the task's processes start instead.
    """
    environ = os.environ if environ is None else environ
    if config is None:
        return {}
    applied = {k: v for k, v in config.environment.variables.items() if k not in environ}
    environ.update(applied)
    return applied


class ExperimentResources(_Strict):
    slots_per_trial: _bounded_int(1, 4096) = 1  # type: ignore[valid-type]


class Reproducibility(_Strict):
    experiment_seed: _bounded_int(0, 2**31 - 1) | None = None  # type: ignore[valid-type]


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


# --- Determined configs: what det_sdk accepts without implementing it ---------------------
#
# Users migrating from Determined bring configs written for it. Fields that Determined
# knows but det_sdk does not implement are accepted and dropped, with one warning that
# lists them (``ignored_fields``); any other unknown key is still an error, so a typo
# never passes silently. Source: Determined's experiment config reference
# (docs/reference/experiment-config-reference, "Experiment Configuration Reference") and
# its schema, master/pkg/schemas/expconf/experiment_config.go (ExperimentConfigV0, with
# its legacy fields data_layer, internal, batches_per_step from older releases).
IGNORED_DETERMINED_FIELDS: dict[str, frozenset[str]] = {
    # top level
    "": frozenset({
        "bind_mounts", "checkpoint_policy", "data_layer", "debug", "integration",
        "internal", "labels", "log_policies", "optimizations",
        "pbs", "perform_initial_validation", "profiling", "project", "security", "slurm",
        "tensorboard_storage", "workspace", "batches_per_step",
    }),
    # resources: det_sdk schedules slots on one host; pools, priorities, devices are moot
    "resources": frozenset({
        "max_slots", "weight", "native_parallel", "shm_size", "resource_pool", "priority",
        "is_single_node", "devices",
    }),
    # searcher: warm starts from another trial's checkpoint and custom brackets are not
    # implemented (det_sdk's ASHA already stops once)
    "searcher": frozenset({
        "source_trial_id", "source_checkpoint_uuid", "stop_once", "bracket_rungs",
    }),
    # environment: det_sdk implements environment_variables; tasks are processes on the
    # master's host or a Slurm cluster, with no container image, pod or ports of their own
    "environment": frozenset({
        "image", "force_pull_image", "registry_auth", "pod_spec", "add_capabilities",
        "drop_capabilities", "ports", "proxy_ports",
    }),
    # checkpoint_storage (shared_fs): container paths mean nothing without containers
    "checkpoint_storage": frozenset({
        "storage_path", "propagation", "container_path", "checkpoint_path",
        "tensorboard_path",
    }),
}

#: The command that runs a trial class: Determined's "module:Class" entrypoint
#: (``model_def:MNISTTrial``) becomes ``python3 -m det_sdk.launch.trial model_def:MNISTTrial``,
#: which runs a TFKerasTrial or a PyTorchTrial (it dispatches on the class).
TRIAL_RUNNER = "python3 -m det_sdk.launch.trial"
_TRIAL_CLASS = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


def trial_class_command(entrypoint: str) -> str:
    """The command for an entrypoint: a ``module:Class`` runs that trial class.

    >>> trial_class_command("model_def:MNISTTrial")
    'python3 -m det_sdk.launch.trial model_def:MNISTTrial'
    >>> trial_class_command("python3 train.py")
    'python3 train.py'
    """
    spec = entrypoint.strip()
    return f"{TRIAL_RUNNER} {spec}" if _TRIAL_CLASS.fullmatch(spec) else entrypoint


# Determined's launcher modules, under either package name: they start a node's workers
_LAUNCHER = re.compile(r"(?:^|\s)-m\s+(?:det_sdk|determined)\.launch\."
                       r"(?:horovod|torch_distributed|tensorflow)\b")


def _det_sdk_launchers(command: str) -> str:
    """Determined's launcher modules by det_sdk's name (``determined.launch.X``).

    >>> _det_sdk_launchers("python3 -m determined.launch.torch_distributed python3 t.py")
    'python3 -m det_sdk.launch.torch_distributed python3 t.py'
    """
    if re.search(r"-m\s+(?:det_sdk|determined)\.launch\.deepspeed\b", command):
        raise ConfigError("DeepSpeed's launcher (launch.deepspeed) is not provided by det_sdk; "
                          "use launch.torch_distributed, launch.horovod or launch.tensorflow")
    return re.sub(r"(-m\s+)determined\.launch\.", r"\1det_sdk.launch.", command)


def entrypoint_runs_of(raw: Mapping[str, Any]) -> str:
    """How the master runs a raw config's command: ``per_node`` or ``per_slot``.

    Determined's ``entrypoint:`` runs once per node (its launchers start the workers);
    the proposal's ``entrypoint_script:`` and a ``module:Class`` trial run once per slot
    under horovodrun, as det_sdk always has.

    >>> entrypoint_runs_of({"entrypoint": "python3 launcher.py python3 train.py"})
    'per_node'
    >>> entrypoint_runs_of({"entrypoint_script": "python3 train.py"})
    'per_slot'
    >>> entrypoint_runs_of({"entrypoint": "model_def:MNistTrial"})
    'per_slot'
    """
    command = raw.get("entrypoint")
    if "entrypoint_script" in raw or not isinstance(command, str):
        return "per_slot"
    return "per_slot" if _TRIAL_CLASS.fullmatch(command.strip()) else "per_node"


def launch_warnings(cfg: ExperimentConfig) -> list[str]:
    """What a user moving from det_sdk's older launch should hear about this config.

    >>> cfg = ExperimentConfig.model_validate({"entrypoint": "python3 train.py",
    ...                                        "resources": {"slots_per_trial": 2}})
    >>> launch_warnings(cfg)[0][:60]
    'entrypoint: runs once per node, as Determined runs it: with '
    """
    slots = cfg.resources.slots_per_trial
    command = cfg.entrypoint_script or ""
    if cfg.entrypoint_runs != "per_node" or slots == 1 or _LAUNCHER.search(command):
        return []
    return [f"entrypoint: runs once per node, as Determined runs it: with slots_per_trial "
            f"{slots}, {command!r} must start the node's workers itself (len(slot_ids) of "
            "det.get_cluster_info()). For one process per slot under horovodrun, as "
            "det.keras.init() scripts expect, write entrypoint_script: instead, or start it "
            "with python3 -m det_sdk.launch.horovod -- ..."]


def ignored_fields(raw: Any) -> list[str]:
    """The Determined fields of an experiment config that det_sdk accepts but ignores.

    >>> ignored_fields({"environment": {"image": "x"}, "resources": {"shm_size": 1}})
    ['environment.image', 'resources.shm_size']
    """
    if not isinstance(raw, Mapping):
        return []
    found = []
    for section, names in IGNORED_DETERMINED_FIELDS.items():
        where = raw if not section else raw.get(section)
        if isinstance(where, Mapping):
            found += [f"{section}.{k}" if section else k for k in where if k in names]
    env = raw.get("environment")
    by_device = env.get("environment_variables") if isinstance(env, Mapping) else None
    if isinstance(by_device, Mapping):  # det_sdk's slots are CPUs: only `cpu` applies
        found += [f"environment.environment_variables.{k}" for k in ("cuda", "gpu", "rocm")
                  if by_device.get(k)]
    return sorted(found)


def ignored_fields_warning(fields: list[str]) -> str:
    """The one warning for a config's ignored Determined fields."""
    return ("det_sdk ignores these Determined config fields, which it does not implement: "
            + ", ".join(fields))


def _without_ignored(raw: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in raw.items() if k not in IGNORED_DETERMINED_FIELDS[""]}
    for section, names in IGNORED_DETERMINED_FIELDS.items():
        if section and isinstance(out.get(section), Mapping):
            out[section] = {k: v for k, v in out[section].items() if k not in names}
    return out


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


class ExperimentConfig(_Strict):
    """An experiment: hyperparameters, searcher, entrypoint and training policy.

    >>> cfg = ExperimentConfig.model_validate({"entrypoint": "python3 train.py"})
    >>> cfg.entrypoint_script
    'python3 train.py'
    """

    name: str | None = None
    description: str | None = None
    # Determined's nested hyperparameters: a group (a mapping without `type`) holds more
    hyperparameters: dict[str, Hyperparameter] = Field(default_factory=dict)
    searcher: Searcher | None = None
    entrypoint_script: str | None = Field(
        default=None, validation_alias=AliasChoices("entrypoint_script", "entrypoint")
    )
    # How the master runs the command (det_sdk's, recorded at create; see
    # entrypoint_runs_of): "per_node", once per node as Determined runs `entrypoint:`
    # (a launcher starts the per-slot workers), or "per_slot", one process per slot
    # under horovodrun as the proposal's `entrypoint_script:` and `module:Class` run.
    entrypoint_runs: Literal["per_slot", "per_node"] | None = None
    resources: ExperimentResources = Field(default_factory=ExperimentResources)
    min_validation_period: Length | None = None
    min_checkpoint_period: Length | None = None
    # batches between reports of the training metrics' running averages (Determined's name)
    scheduling_unit: _bounded_int(1, MAX_LENGTH) = 100  # type: ignore[valid-type]
    checkpoint_storage: CheckpointStorageConfig = Field(default_factory=CheckpointStorageConfig)
    max_restarts: _bounded_int(0, 10_000) = 5  # type: ignore[valid-type]
    reproducibility: Reproducibility = Field(default_factory=Reproducibility)
    # Determined's: how many records an epoch of the training data holds. det_sdk's
    # epoch is one pass over the data, so this only documents it (a TFKerasTrial whose
    # data has another size says so); lengths in records need global_batch_size.
    records_per_epoch: _bounded_int(1, MAX_LENGTH) | None = None  # type: ignore[valid-type]
    data: dict[str, Any] = Field(default_factory=dict)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    # Determined fields this config gave that det_sdk ignores (see ignored_fields)
    _ignored: list[str] = PrivateAttr(default_factory=list)

    @property
    def ignored_fields(self) -> list[str]:
        """The Determined fields the config gave that det_sdk accepted and ignores.

        >>> ExperimentConfig.model_validate({"profiling": {"enabled": True}}).ignored_fields
        ['profiling']
        """
        return list(self._ignored)

    @model_validator(mode="wrap")
    @classmethod
    def _from_determined(cls, raw: Any, handler: Any) -> Any:
        if not isinstance(raw, Mapping):
            return handler(raw)
        ignored = ignored_fields(raw)
        raw = _determined_lengths(_without_ignored(raw))
        entrypoint = raw.get("entrypoint")
        if isinstance(entrypoint, list) and all(isinstance(a, str) for a in entrypoint):
            # Determined also takes the command as a list of arguments
            raw["entrypoint"] = shlex.join(entrypoint)
        if raw.get("entrypoint_runs") is None:
            raw["entrypoint_runs"] = entrypoint_runs_of(raw)
        cfg = handler(raw)
        cfg._ignored = ignored
        return cfg

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

    _entrypoint = field_validator("entrypoint_script")(_entrypoint_ok)

    @field_validator("entrypoint_script")
    @classmethod
    def _trial_class(cls, v: str | None) -> str | None:
        # Determined's `entrypoint: model_def:MNISTTrial` names a TFKerasTrial class: the
        # master runs it like any command, through det_sdk's trial runner.
        return trial_class_command(_det_sdk_launchers(v)) if v is not None else None

    @model_validator(mode="after")
    def _fits_in_the_environment(self) -> ExperimentConfig:
        _check_size(self)
        return self


class JobResources(_Strict):
    slots: _bounded_int(1, 4096) = 1  # type: ignore[valid-type]


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
    # a job process that fails is launched again this many times (as a trial is); a
    # streamed predict or torch_batch_process resumes from its progress
    max_restarts: _bounded_int(0, 10_000) = 5  # type: ignore[valid-type]
    data: dict[str, Any] = Field(default_factory=dict)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)

    @model_validator(mode="before")
    @classmethod
    def _determined_environment(cls, raw: Any) -> Any:
        # Determined's other environment fields (image, pod_spec, ...): accepted, ignored
        env = raw.get("environment") if isinstance(raw, Mapping) else None
        if isinstance(env, Mapping):
            names = IGNORED_DETERMINED_FIELDS["environment"]
            raw = {**raw, "environment": {k: v for k, v in env.items() if k not in names}}
        return raw

    _entrypoint = field_validator("entrypoint_script")(_entrypoint_ok)

    @model_validator(mode="after")
    def _fits_in_the_environment(self) -> JobConfig:
        _check_size(self)
        return self


# --- parsing helpers ----------------------------------------------------------------------


def format_validation_error(err: ValidationError, source: str = "config",
                            known: Mapping[str, set[str]] | None = None) -> str:
    """One line per problem, each naming the field by its dotted path.

    ``known``: the field names of a section (``""``: the top level), from which an
    unknown field gets a "did you mean" (a typo of a Determined field, most often).
    """
    lines = []
    for e in err.errors():
        loc = _user_path(e["loc"])
        path = ".".join(loc) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "union_tag_invalid" and e.get("ctx", {}).get("tag") == "<missing>":
            msg = ("has a range but no 'type'; give one of: int, double, log, categorical "
                   "(or write a constant as a plain value)")
        elif e["type"] == "union_tag_invalid" and loc[:1] == ["hyperparameters"]:
            # the discriminator is a function (a mapping without `type` is a nested
            # group): say it as the user wrote it, without the group's tag
            tags = ", ".join(repr(t) for t in ("const", "int", "double", "log", "categorical"))
            msg = (f"Input tag {e['ctx']['tag']!r} found using 'type' does not match any of "
                   f"the expected tags: {tags} (or a mapping without 'type': a nested group)")
        elif e["type"] == "extra_forbidden" and loc[:1] == ["searcher"] and loc[-1] in (
                "time_metric", "max_time"):
            msg = ("unknown field for this searcher: only adaptive_asha takes time_metric + "
                   "max_time (single, grid and random train each trial as its script says, "
                   "or to max_length)")
        elif e["type"] == "extra_forbidden" and len(loc) > 1 and loc[-2] in _LENGTH_NAMES:
            msg = "unknown field (a length is one of {epochs: N}, {batches: N}, {records: N})"
        elif e["type"] == "extra_forbidden":
            msg = "unknown field"
            near = difflib.get_close_matches(loc[-1], (known or {}).get(".".join(loc[:-1]), ()),
                                             n=1, cutoff=0.75)
            if near:
                msg += f" (did you mean {near[0]!r}?)"
        elif e["type"] == "missing":
            msg = "required field is missing"
        elif e["type"] == "model_type" and loc and loc[-1] in _LENGTH_NAMES:
            # never pydantic's "valid dictionary or instance of Length"
            msg = f"expected {_LENGTH_FORMS[loc[-1]]}, got {e.get('input')!r}"
        elif "input" in e and e["type"] != "value_error":
            msg = f"{msg} (got {e['input']!r})"
        if _NAMED.match(msg) and (not loc or msg.startswith((f"{path}.", f"{path}:"))):
            lines.append(f"  {msg}")  # a check that names its own field
            continue
        lines.append(f"  {path}: {msg}")
    return f"invalid {source}:\n" + "\n".join(lines)


_NAMED = re.compile(r"[A-Za-z_][\w.]*: ")
_LENGTH_NAMES = {"max_length", "min_validation_period", "min_checkpoint_period"}
_LENGTH_FORMS = {
    "max_length": "a length: an integer (unitless, the Core API's: max_length: 100) or one "
                  "of {epochs: N}, {batches: N}, {records: N}",
    "min_validation_period": "a length: {epochs: N}, {batches: N}, {records: N}, or an "
                             "integer of steps (scheduling_unit batches each)",
}
_LENGTH_FORMS["min_checkpoint_period"] = _LENGTH_FORMS["min_validation_period"]


_HP_TAGS = {"const", "int", "double", "log", "categorical"}
_SEARCHER_TAGS = {"single", "grid", "random", "adaptive_asha"}


def _user_path(loc: tuple[Any, ...]) -> list[str]:
    """The path as the user wrote it: without the union tags pydantic inserts.

    Tags sit at known places (``searcher.<name>``, ``hyperparameters.<hp>.<type>``),
    so a user's key that happens to read like a tag ("log", "random") is kept.
    """
    loc = tuple(p for p in loc if not (isinstance(p, str) and p.startswith("function-")))
    out = []
    start = 0
    if loc and loc[0] == "hyperparameters":
        # hyperparameters, name, tag[, name, tag ...] while the tag is a nested group's
        out.append("hyperparameters")
        start = 1
        while start + 1 < len(loc) and loc[start + 1] in _HP_TAGS | {_GROUP}:
            out.append(str(loc[start]))
            start += 2
            if loc[start - 1] != _GROUP:
                break
    for i, part in enumerate(loc[start:], start):
        if i == 1 and loc[0] == "searcher" and part in _SEARCHER_TAGS:
            continue
        out.append(str(part))
    return out


def _validate(model: type[BaseModel], raw: Any, source: str) -> Any:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"invalid {source}: expected a mapping at the top level, got "
                          f"{type(raw).__name__}")
    try:
        _expanded_size(dict(raw))  # a mapping from JSON or code: the same limits as YAML
        return model.model_validate(raw)
    except ValidationError as err:
        known = _experiment_fields() if model is ExperimentConfig else None
        raise ConfigError(format_validation_error(err, source, known)) from None
    except ConfigError as err:
        raise ConfigError(f"invalid {source}: {err}") from None
    except RecursionError:
        raise ConfigError(f"invalid {source}: nested too deeply") from None


def _experiment_fields() -> dict[str, set[str]]:
    """Every field name an experiment config accepts, by section (for "did you mean")."""
    sections: dict[str, Any] = {"": ExperimentConfig, "resources": ExperimentResources,
                                "environment": EnvironmentConfig,
                                "checkpoint_storage": CheckpointStorageConfig}
    out = {}
    for section, model in sections.items():
        names = set(model.model_fields) | set(IGNORED_DETERMINED_FIELDS.get(section, ()))
        out[section] = names | ({"entrypoint"} if not section else set())
    return out


MAX_YAML_DEPTH = 64  # levels of nesting
MAX_YAML_VALUES = 1_000_000  # values once aliases are expanded

_YAML = "tag:yaml.org,2002:"
# The tags of YAML 1.2's core schema (JSON's types), plus the merge key `<<`
_JSON_TAGS = {f"{_YAML}{t}" for t in ("str", "int", "float", "bool", "null", "seq", "map")}
_MERGE_TAG = f"{_YAML}merge"
_KIND = {"str": "text", "int": "a number", "float": "a number", "bool": "a boolean",
         "null": "null", "seq": "a list", "map": "a mapping"}


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, resolving plain scalars as YAML 1.2's core schema does.

    YAML 1.2 (core schema) is what Determined reads: its master parses configs with a
    YAML 1.2 parser and its CLI with ruamel.yaml's safe loader (YAML 1.2). PyYAML alone
    follows YAML 1.1, where ``1e-3`` is the *string* ``'1e-3'`` (a float needs a dot).
    Here:

    - numbers: ``1e-3``, ``-1E+4``, ``.5``, ``+.5e1``, ``5.`` are floats; ``.inf``,
      ``-.Inf``, ``.nan`` too; ``0o17`` (octal) and ``0x1F`` (hex) are ints, ``017`` is
      17 (1.2 has no leading-zero octal) and ``1_000``/``1:30`` are strings;
    - booleans: only ``true``/``false`` (any of ``true``, ``True``, ``TRUE``); YAML 1.1's
      ``yes``, ``no``, ``on``, ``off``, ``y``, ``n`` are *strings*, as in Determined
      (write ``true``/``false`` for a boolean);
    - null: ``null``, ``Null``, ``NULL``, ``~`` and an empty value;
    - dates such as ``2024-01-01`` are strings (1.2 has no implicit timestamp), and
      ``=`` is a string;
    - a quoted scalar is always a string.

    A merge key ``<<: *a`` or ``<<: [*a, *b]`` merges as YAML users expect (the
    mapping's own keys win, then the first listed mapping).
    """

    yaml_implicit_resolvers: dict[Any, Any] = {}

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        """Merge keys as the YAML merge spec says: the mapping's own keys win, then the
        earlier of ``<<: [*a, *b]``. (PyYAML's own tells keys apart by the identity of
        their Python strings, so which of two merged ``lr`` wins was left to chance.)"""
        merged: list[list[Any]] = []
        own = []
        for key_node, value_node in node.value:
            if key_node.tag != _MERGE_TAG:
                own.append((key_node, value_node))
                continue
            sources = (value_node.value if isinstance(value_node, yaml.SequenceNode)
                       else [value_node])
            for sub in sources:
                if not isinstance(sub, yaml.MappingNode):
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"expected a mapping or a list of mappings for merging, but found "
                        f"{sub.id}", sub.start_mark)
                self.flatten_mapping(sub)
                merged.append(sub.value)
        # lowest priority first: the mapping is built with the last of a key winning
        node.value = [pair for sub in reversed(merged) for pair in sub] + own

    def construct_yaml_bool(self, node: yaml.ScalarNode) -> bool:
        value = self.construct_scalar(node)  # type: ignore[no-untyped-call]
        if value.lower() not in ("true", "false"):
            raise ConfigError(f"{value!r} is not a boolean (true or false)")
        return bool(value.lower() == "true")

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        value = self.construct_scalar(node)  # type: ignore[no-untyped-call]
        digits = value.lstrip("+-")
        sign = -1 if value.startswith("-") else 1
        try:
            if digits[:2] in ("0o", "0x"):
                return sign * int(digits[2:], 8 if digits[1] == "o" else 16)
            return sign * int(digits, 10)
        except ValueError:
            raise ConfigError(f"{value!r} is not an integer") from None

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        value = self.construct_scalar(node)  # type: ignore[no-untyped-call]
        special = value.lower().lstrip("+-")
        if special in (".inf", ".nan"):
            return (-1.0 if value.startswith("-") else 1.0) * float(special[1:])
        try:
            return float(value)
        except ValueError:
            raise ConfigError(f"{value!r} is not a number") from None


for _tag, _pattern, _first in [
    ("bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
    ("float", r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
              r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$", "-+.0123456789"),
    ("null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("merge", r"^(?:<<)$", "<"),
]:
    _Loader.add_implicit_resolver(f"{_YAML}{_tag}", re.compile(_pattern), list(_first))
for _tag in ("bool", "int", "float"):
    _Loader.add_constructor(f"{_YAML}{_tag}", getattr(_Loader, f"construct_yaml_{_tag}"))


def _where(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _check_json_nodes(loader: _Loader, node: yaml.Node, path: str = "", depth: int = 0,
                      seen: set[int] | None = None) -> None:
    """Refuse what JSON cannot hold, before anything is built: tags outside JSON's types
    (``!!binary``, ``!!set``, ``!!timestamp``, ``!!omap``, ``!!python/...``, ``!custom``),
    keys that are lists or mappings, and a key given twice in one mapping (last-wins
    would silently drop the first). Errors name the line and the field's path."""
    seen = set() if seen is None else seen
    if id(node) in seen:  # an alias: checked where its anchor is
        return
    seen.add(id(node))
    if depth > MAX_YAML_DEPTH:
        raise ConfigError(f"nested more than {MAX_YAML_DEPTH} levels deep")
    field = path or "(top level)"
    if node.tag not in _JSON_TAGS:
        name = node.tag.replace(_YAML, "!!")
        how = ("quote it to keep it as text" if isinstance(node, yaml.ScalarNode) else
               "write a plain list or mapping")
        raise ConfigError(
            f"{_where(node.start_mark)}: {field}: the YAML tag {name} has no JSON form; "
            f"expected text, a number, a boolean, null, a list or a mapping ({how})")
    if isinstance(node, yaml.ScalarNode):
        try:  # an explicit !!int, !!float or !!bool that its text does not match
            loader.construct_object(node)  # type: ignore[no-untyped-call]
        except ConfigError as err:
            raise ConfigError(f"{_where(node.start_mark)}: {field}: {err}") from None
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_json_nodes(loader, item, f"{path}[{i}]", depth + 1, seen)
    elif isinstance(node, yaml.MappingNode):
        keys: dict[Any, yaml.Node] = {}
        for key, value in node.value:
            if not isinstance(key, yaml.ScalarNode):
                raise ConfigError(
                    f"{_where(key.start_mark)}: {field}: a mapping key that is a "
                    f"{'list' if isinstance(key, yaml.SequenceNode) else 'mapping'} (YAML's "
                    f"'? [a, b]') has no JSON form; expected a plain key such as a name")
            if key.tag == _MERGE_TAG:
                # merged keys are overridden by the mapping's own: not duplicates
                _check_json_nodes(loader, value, f"{path}.<<" if path else "<<", depth + 1,
                                  seen)
                continue
            _check_json_nodes(loader, key, field, depth + 1, seen)  # its tag
            name = loader.construct_object(key)  # type: ignore[no-untyped-call]
            where = f"{path}.{name}" if path else str(name)
            if name in keys:
                raise ConfigError(
                    f"{_where(key.start_mark)}: {where}: duplicate key {name!r} at line "
                    f"{key.start_mark.line + 1} (first at line "
                    f"{keys[name].start_mark.line + 1}); give each key once")
            keys[name] = key
            _check_json_nodes(loader, value, where, depth + 1, seen)


def _expanded_size(obj: Any, depth: int = 0, memo: dict[int, int] | None = None,
                   active: set[int] | None = None) -> int:
    """How many values ``obj`` holds once YAML aliases are copied out (as JSON does).

    Aliases are shared objects, so this counts a node's size once and multiplies: an
    "alias bomb" of a few lines shows its billions without being expanded.

    >>> a = [1, 2]; _expanded_size([a, a, a])
    10
    """
    memo = {} if memo is None else memo
    active = set() if active is None else active
    if not isinstance(obj, (dict, list)):
        return 1
    if depth > MAX_YAML_DEPTH:
        raise ConfigError(f"nested more than {MAX_YAML_DEPTH} levels deep")
    key = id(obj)
    if key in memo:
        return memo[key]
    if key in active:
        raise ConfigError("a YAML alias refers to a value that contains it")
    active.add(key)
    items = [*obj.keys(), *obj.values()] if isinstance(obj, dict) else obj
    size = 1 + sum(_expanded_size(v, depth + 1, memo, active) for v in items)
    active.discard(key)
    memo[key] = size
    return size


def load_yaml_text(text: str, source: str = "config") -> Any:
    """Parse a config's YAML as YAML 1.2 (core schema) reads it, into JSON's types.

    Numbers, booleans and nulls as :class:`_Loader` says (``1e-3`` is a float, ``yes`` a
    string); tags outside JSON's types, complex keys, duplicate keys, deep nesting and
    alias bombs are refused with a :class:`ConfigError` naming ``source``, the line and
    the field.

    >>> load_yaml_text("lr: 1e-3\\ndropout: .5\\nflag: yes")
    {'lr': 0.001, 'dropout': 0.5, 'flag': 'yes'}
    >>> load_yaml_text("{a: 1, a: 2}")
    Traceback (most recent call last):
    ...
    det_sdk.config.ConfigError: config: line 1, column 8: a: duplicate key 'a' at line 1 ...
    """
    loader = _Loader(text)
    try:
        node = loader.get_single_node()  # type: ignore[no-untyped-call]
        if node is None:
            return None
        _check_json_nodes(loader, node)
        data = loader.construct_document(node)  # type: ignore[no-untyped-call]
        size = _expanded_size(data)
    except ConfigError as err:
        raise ConfigError(f"{source}: {err}") from None
    except RecursionError:
        raise ConfigError(f"{source}: nested too deeply (more than {MAX_YAML_DEPTH} "
                          f"levels)") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{source} is not valid YAML: {err}") from None
    finally:
        loader.dispose()  # type: ignore[no-untyped-call]
    if size > MAX_YAML_VALUES:
        raise ConfigError(f"{source}: its aliases expand to {size} values, over the limit of "
                          f"{MAX_YAML_VALUES} (an alias bomb?)")
    return data


def load_yaml_file(path: str | os.PathLike[str]) -> Any:
    """Read a YAML file, with errors that name the file."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {p}") from None
    except OSError as err:
        raise ConfigError(f"cannot read config file {p}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"config file {p} is not text (UTF-8): {err}") from None
    return load_yaml_text(text, f"config file {p}")


def parse_experiment_config(raw: Mapping[str, Any] | str | os.PathLike[str], *,
                            warn_ignored: bool = False) -> ExperimentConfig:
    """Validate an experiment config given as a mapping or a YAML file path.

    ``warn_ignored``: log the one warning about Determined fields det_sdk ignores
    (``cfg.ignored_fields``). Off by default: where a config enters (a local run, the
    master's create, the CLI) says it once, not every parse of it.

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
    cfg = _validate(ExperimentConfig, raw, source)
    if warn_ignored and cfg.ignored_fields:
        log.warning("%s: %s", source, ignored_fields_warning(cfg.ignored_fields))
    return cfg


def parse_job_config(raw: Mapping[str, Any] | str | os.PathLike[str]) -> JobConfig:
    """Validate a job config (``det job run``) given as a mapping or a YAML file path."""
    source = "job config"
    if isinstance(raw, (str, os.PathLike)):
        source = f"job config {raw}"
        raw = load_yaml_file(raw)
    return _validate(JobConfig, raw, source)
