"""Checkpoint storage: where checkpoints go and how many are kept.

    >>> CheckpointStorageConfig().save_trial_latest
    1
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from det_sdk.config._base import ConfigError, _Strict, _within


class CheckpointStorageConfig(_Strict):
    """Where checkpoints go and how many are kept."""

    type: Literal["shared_fs"] = "shared_fs"
    host_path: str | None = None
    save_trial_latest: Annotated[int, _within(0, 1_000_000)] = 1
    save_trial_best: Annotated[int, _within(0, 1_000_000)] = 1
    save_experiment_best: Annotated[int, _within(0, 1_000_000)] = 0

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
    if not isinstance(storage, Mapping):
        return dict(raw), None
    path = storage.get("host_path")
    if not isinstance(path, str) or not path or os.path.isabs(path):
        return dict(raw), None
    resolved = os.path.normpath(os.path.join(os.path.abspath(config_dir),
                                             os.path.expanduser(path)))
    return {**raw, "checkpoint_storage": {**storage, "host_path": resolved}}, resolved
