"""Environment variables (Determined's ``environment.environment_variables``): checked at
create, set for a task's processes by the master, or by a local run where the shell has
not set them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, Protocol

from pydantic import BaseModel, Field, ValidationError, field_validator

from det_sdk.config._base import ConfigError, _Strict
from det_sdk.config.messages import format_validation_error

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


class WithEnvironment(Protocol):
    """A parsed config with an environment section (an ExperimentConfig, a JobConfig):
    named by what it has, so that this module, which both configs import, imports neither."""

    @property
    def environment(self) -> EnvironmentConfig: ...


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


def apply_environment_variables(config: WithEnvironment | None,
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
