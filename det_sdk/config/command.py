"""The command config: Determined's ``det cmd run`` task (``CommandConfig``), the fields
det_sdk runs a command with: ``entrypoint``, ``description``, ``resources.slots``,
``environment.environment_variables``, and ``hyperparameters`` (constants the command's
``det.keras.init()`` reads, det_sdk's addition). Determined's other command fields
(``bind_mounts``, ``work_dir``, ``idle_timeout``...) are refused by name: a command here is
a process on the master's slots, with no container to mount into.

>>> cfg = parse_command_config({"entrypoint": ["echo", "hi"]})
>>> cfg.command_line(), cfg.resources.slots
('echo hi', 1)
>>> parse_command_config({"entrypoint": "echo $HOME | wc"}).command_line()
'echo $HOME | wc'
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from det_sdk.config._base import ConfigError, _check_size, _Strict, _within
from det_sdk.config.determined import without_container_environment
from det_sdk.config.environment import EnvironmentConfig

__all__ = ["CommandConfig", "CommandResources", "parse_command_config"]

#: the most slots a command may ask for (as a job's)
MAX_SLOTS = 4096


class CommandResources(_Strict):
    """``resources``: ``slots`` (0: a command that holds no slot, as Determined allows)."""

    slots: Annotated[int, _within(0, MAX_SLOTS)] = 1


class CommandConfig(_Strict):
    """A command (``det cmd run``): what runs, on how many slots, with which variables.

    ``entrypoint``: a list of words (run as they are, Determined's ``exec "$@"``) or one
    string (run by the shell, Determined's ``sh -c``).

    >>> CommandConfig.model_validate({"entrypoint": ["true"]}).description is None
    True
    """

    description: Annotated[str, Field(max_length=1024)] | None = None
    entrypoint: list[str] | str
    resources: CommandResources = Field(default_factory=CommandResources)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    # det_sdk's: what `det.keras.init()` in the command gives as `context.training.hparams`
    hyperparameters: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _determined_environment(cls, raw: Any) -> Any:
        # Determined's other environment fields (image, pod_spec, ...): no container here
        return without_container_environment(raw)

    @field_validator("entrypoint")
    @classmethod
    def _entrypoint(cls, v: list[str] | str) -> list[str] | str:
        words = [v] if isinstance(v, str) else v
        if not words or not any(w.strip() for w in words):
            raise ConfigError("expected a command to run (e.g. det cmd run python3 x.py)")
        if any("\x00" in w for w in words):
            raise ConfigError("contains a NUL character, which no command line can hold")
        return v

    @field_validator("hyperparameters")
    @classmethod
    def _constants(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _constant_values(v, "")

    @model_validator(mode="after")
    def _fits_in_the_environment(self) -> CommandConfig:
        _check_size(self)
        return self

    def command_line(self) -> str:
        """The shell command that runs it: one string as it is, a list word by word."""
        if isinstance(self.entrypoint, str):
            return self.entrypoint
        if len(self.entrypoint) == 1:  # Determined: one argument goes to `sh -c`
            return self.entrypoint[0]
        return shlex.join(self.entrypoint)


def _constant_values(hps: Mapping[str, Any], path: str) -> dict[str, Any]:
    """A command's hyperparameters as values: Determined's ``{type: const, val: V}`` is
    ``V``; a searched one (``int``, ``double``, ``log``, ``categorical``) is refused, as a
    command has no searcher; a group (a mapping without ``type``) is nested.

    >>> _constant_values({"lr": {"type": "const", "val": 0.1}, "opt": {"m": 0.9}}, "")
    {'lr': 0.1, 'opt': {'m': 0.9}}
    """
    out: dict[str, Any] = {}
    for name, value in hps.items():
        where = f"{path}{name}"
        if isinstance(value, Mapping) and "type" in value:
            if value.get("type") != "const" or "val" not in value:
                raise ConfigError(f"{where}: a command has no searcher: give a value (or "
                                  "{type: const, val: V}), not a range to search")
            out[name] = value["val"]
        elif isinstance(value, Mapping):
            out[name] = _constant_values(value, f"{where}.")
        else:
            out[name] = value
    return out


def parse_command_config(raw: Any) -> CommandConfig:
    """Validate a command config (a mapping); ``ConfigError`` names every bad field.

    >>> parse_command_config({"entrypoint": ["true"], "bind_mounts": []})
    Traceback (most recent call last):
    ...
    det_sdk.config.ConfigError: invalid command config:
      bind_mounts: unknown field
    """
    from det_sdk.config.parsing import _validate

    return _validate(CommandConfig, raw, "command config")
