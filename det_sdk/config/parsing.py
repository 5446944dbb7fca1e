"""Parsing a config: a mapping or a YAML file in, a validated ``ExperimentConfig`` or
``JobConfig`` out, or one ``ConfigError`` naming every bad field.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from det_sdk.config._base import ConfigError
from det_sdk.config.determined import IGNORED_DETERMINED_FIELDS, ignored_fields_warning
from det_sdk.config.environment import EnvironmentConfig
from det_sdk.config.experiment import ExperimentConfig, ExperimentResources
from det_sdk.config.job import JobConfig
from det_sdk.config.messages import format_validation_error
from det_sdk.config.storage import CheckpointStorageConfig
from det_sdk.config.yaml_loading import _expanded_size, load_yaml_file

# the package's name, as before it was one: users' logging configs and tests filter on it
log = logging.getLogger("det_sdk.config")


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
