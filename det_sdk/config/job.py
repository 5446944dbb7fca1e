"""The job config: a generic job (``det job run``), e.g. batch inference."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AliasChoices, Field, field_validator, model_validator

from det_sdk.config._base import _check_size, _entrypoint_ok, _Strict, _within
from det_sdk.config.determined import without_container_environment
from det_sdk.config.environment import EnvironmentConfig


class JobResources(_Strict):
    slots: Annotated[int, _within(1, 4096)] = 1
    # the queue's order (det_sdk.master.queue): 1-99, lower first, Determined's default 42
    priority: Annotated[int, _within(1, 99)] = 42


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
    max_restarts: Annotated[int, _within(0, 10_000)] = 5
    data: dict[str, Any] = Field(default_factory=dict)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)

    @model_validator(mode="before")
    @classmethod
    def _determined_environment(cls, raw: Any) -> Any:
        # Determined's other environment fields (image, pod_spec, ...): accepted, ignored
        return without_container_environment(raw)

    _entrypoint = field_validator("entrypoint_script")(_entrypoint_ok)

    @model_validator(mode="after")
    def _fits_in_the_environment(self) -> JobConfig:
        _check_size(self)
        return self
