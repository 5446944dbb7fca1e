"""The experiment config: hyperparameters, searcher, entrypoint and training policy.

Determined's forms (ignored fields, lengths in records or steps, a list entrypoint, its
launchers) are turned into det_sdk's here, before the fields are validated.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Field, PrivateAttr, field_validator, model_validator

from det_sdk.config._base import (
    MAX_LENGTH,
    ConfigError,
    _check_size,
    _entrypoint_ok,
    _Strict,
    _within,
)
from det_sdk.config.determined import (
    _LAUNCHER,
    _det_sdk_launchers,
    _without_ignored,
    entrypoint_runs_of,
    ignored_fields,
    trial_class_command,
)
from det_sdk.config.environment import EnvironmentConfig
from det_sdk.config.hyperparameters import Hyperparameter, _parse_hyperparameters
from det_sdk.config.integrations import IntegrationsConfig
from det_sdk.config.lengths import Length, _determined_lengths
from det_sdk.config.profiling import ProfilingConfig
from det_sdk.config.searchers import Searcher
from det_sdk.config.storage import CheckpointStorageConfig


class ExperimentResources(_Strict):
    """Slots per trial and the queue's fields (det_sdk.master.queue): Determined's
    ``priority`` (1-99, lower runs first, default 42), ``weight`` (fair share) and
    ``max_slots`` (the most slots the experiment's trials hold at once).

    >>> ExperimentResources.model_validate({"priority": 10}).priority
    10
    """

    slots_per_trial: Annotated[int, _within(1, 4096)] = 1
    priority: Annotated[int, _within(1, 99)] = 42
    weight: Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)] = 1.0
    max_slots: Annotated[int, _within(1, 1_000_000)] | None = None

    @model_validator(mode="after")
    def _max_slots_fit_a_trial(self) -> ExperimentResources:
        # an experiment that may hold fewer slots than one trial needs would never run
        if self.max_slots is not None and self.max_slots < self.slots_per_trial:
            raise ConfigError(f"max_slots: expected at least slots_per_trial "
                             f"({self.slots_per_trial}), got {self.max_slots}")
        return self


class Reproducibility(_Strict):
    experiment_seed: Annotated[int, _within(0, 2**31 - 1)] | None = None


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
    scheduling_unit: Annotated[int, _within(1, MAX_LENGTH)] = 100
    checkpoint_storage: CheckpointStorageConfig = Field(default_factory=CheckpointStorageConfig)
    max_restarts: Annotated[int, _within(0, 10_000)] = 5
    reproducibility: Reproducibility = Field(default_factory=Reproducibility)
    # Determined's: how many records an epoch of the training data holds. det_sdk's
    # epoch is one pass over the data, so this only documents it (a TFKerasTrial whose
    # data has another size says so); lengths in records need global_batch_size.
    records_per_epoch: Annotated[int, _within(1, MAX_LENGTH)] | None = None
    data: dict[str, Any] = Field(default_factory=dict)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    # Determined's integrations.webhooks: which webhooks this experiment names (issue 60)
    integrations: IntegrationsConfig | None = None
    # Determined's profiler section (det_sdk.profiler reads it)
    profiling: ProfilingConfig = Field(default_factory=ProfilingConfig)
    # Determined fields this config gave that det_sdk ignores (see ignored_fields)
    _ignored: list[str] = PrivateAttr(default_factory=list)

    @property
    def ignored_fields(self) -> list[str]:
        """The Determined fields the config gave that det_sdk accepted and ignores.

        >>> ExperimentConfig.model_validate({"labels": ["a"]}).ignored_fields
        ['labels']
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


def launch_warnings(cfg: ExperimentConfig) -> list[str]:
    """What a user moving from det_sdk's older launch should hear about this config.

    >>> from det_sdk.config import ExperimentConfig
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
