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

One module per concern; import from ``det_sdk.config`` (this package), which names
them all:

- ``_base``: ``ConfigError``, the strict base model, the limits (``MAX_TRIALS``...);
- ``lengths``: ``Length``, and Determined's lengths (records, steps) in its units;
- ``hyperparameters``: constants, ranges and nested groups; ``hp_leaves``, ``hp_nest``;
- ``searchers``: single, grid, random, adaptive ASHA;
- ``storage``: ``CheckpointStorageConfig``; ``resolve_host_path``;
- ``environment``: ``environment_variables`` and who sets them;
- ``determined``: Determined's fields det_sdk ignores, its entrypoints and launchers;
- ``experiment``: ``ExperimentConfig``; ``job``: ``JobConfig``;
- ``yaml_loading``: YAML 1.2 with its safety checks; ``messages``: validation errors as
  users read them; ``parsing``: ``parse_experiment_config``, ``parse_job_config``.
"""

from __future__ import annotations

from det_sdk.config._base import (
    MAX_CONFIG_BYTES,
    MAX_INT,
    MAX_LENGTH,
    MAX_RUNGS,
    MAX_TRIALS,
    ConfigError,
)
from det_sdk.config.determined import (
    IGNORED_DETERMINED_FIELDS,
    TRIAL_RUNNER,
    entrypoint_runs_of,
    ignored_fields,
    ignored_fields_warning,
    trial_class_command,
)
from det_sdk.config.environment import (
    OWNED_ENV_NAMES,
    EnvironmentConfig,
    apply_environment_variables,
    environment_variables,
)
from det_sdk.config.experiment import (
    ExperimentConfig,
    ExperimentResources,
    Reproducibility,
    launch_warnings,
)
from det_sdk.config.hyperparameters import (
    MAX_HP_DEPTH,
    CategoricalHP,
    ConstHP,
    DoubleHP,
    HPSpec,
    Hyperparameter,
    IntHP,
    LogHP,
    hp_leaves,
    hp_nest,
)
from det_sdk.config.job import JobConfig, JobResources
from det_sdk.config.lengths import Length
from det_sdk.config.messages import format_validation_error
from det_sdk.config.parsing import parse_experiment_config, parse_job_config
from det_sdk.config.searchers import (
    AdaptiveASHASearcher,
    GridSearcher,
    RandomSearcher,
    Searcher,
    SingleSearcher,
)
from det_sdk.config.storage import CheckpointStorageConfig, resolve_host_path
from det_sdk.config.yaml_loading import (
    MAX_YAML_DEPTH,
    MAX_YAML_VALUES,
    load_yaml_file,
    load_yaml_text,
)

__all__ = [
    "IGNORED_DETERMINED_FIELDS",
    "MAX_CONFIG_BYTES",
    "MAX_HP_DEPTH",
    "MAX_INT",
    "MAX_LENGTH",
    "MAX_RUNGS",
    "MAX_TRIALS",
    "MAX_YAML_DEPTH",
    "MAX_YAML_VALUES",
    "OWNED_ENV_NAMES",
    "TRIAL_RUNNER",
    "AdaptiveASHASearcher",
    "CategoricalHP",
    "CheckpointStorageConfig",
    "ConfigError",
    "ConstHP",
    "DoubleHP",
    "EnvironmentConfig",
    "ExperimentConfig",
    "ExperimentResources",
    "GridSearcher",
    "HPSpec",
    "Hyperparameter",
    "IntHP",
    "JobConfig",
    "JobResources",
    "Length",
    "LogHP",
    "RandomSearcher",
    "Reproducibility",
    "Searcher",
    "SingleSearcher",
    "apply_environment_variables",
    "entrypoint_runs_of",
    "environment_variables",
    "format_validation_error",
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
