"""Checkpoint storage: where checkpoints go and how many are kept.

Determined's ``checkpoint_storage`` as written: ``type: shared_fs`` (``host_path``) or
``type: s3`` (``bucket``, ``prefix``, ``endpoint_url``, ``access_key``, ``secret_key``;
without keys the standard credential chain), with the retention fields of both. A
``host_path`` written as a URL (``s3://bucket/prefix``) is the same as ``type: s3``.

    >>> CheckpointStorageConfig().save_trial_latest
    1
    >>> c = CheckpointStorageConfig(host_path="s3://ckpts/team/a")
    >>> (c.type, c.bucket, c.prefix)
    ('s3', 'ckpts', 'team/a')
    >>> c = CheckpointStorageConfig(type="s3", bucket="b", access_key="a", secret_key="s")
    >>> c.printable()["secret_key"]
    '********'
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import model_validator

from det_sdk.config._base import ConfigError, _Strict, _within

#: how a secret is shown anywhere it is printed (Determined's mask)
MASK = "********"
#: the fields never shown: masked in describe output, stored configs and messages
SECRET_FIELDS = ("access_key", "secret_key")
#: the fields of each storage type (the retention fields belong to all)
_TYPE_FIELDS = {"shared_fs": ("host_path",),
                "s3": ("bucket", "prefix", "endpoint_url", *SECRET_FIELDS)}


class CheckpointStorageConfig(_Strict):
    """Where checkpoints go and how many are kept."""

    type: Literal["shared_fs", "s3"] = "shared_fs"
    host_path: str | None = None
    # type: s3 (Determined's fields)
    bucket: str | None = None
    prefix: str | None = None
    endpoint_url: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    save_trial_latest: Annotated[int, _within(0, 1_000_000)] = 1
    save_trial_best: Annotated[int, _within(0, 1_000_000)] = 1
    save_experiment_best: Annotated[int, _within(0, 1_000_000)] = 0

    @model_validator(mode="before")
    @classmethod
    def _url_form(cls, data: Any) -> Any:
        """``host_path: s3://bucket/prefix`` is ``type: s3`` with that bucket and prefix."""
        if isinstance(data, Mapping) and isinstance(data.get("host_path"), str) \
                and data["host_path"].startswith("s3://"):
            bucket, _, prefix = data["host_path"][len("s3://"):].partition("/")
            data = {k: v for k, v in data.items() if k != "host_path"}
            if data.setdefault("type", "s3") != "s3":
                raise ConfigError(f"host_path: an s3:// URL with type {data['type']!r}; "
                                  "write type: s3 or leave type out")
            data.update(bucket=bucket, prefix=prefix.strip("/") or None)
        return data

    @model_validator(mode="after")
    def _fields_of_type(self) -> CheckpointStorageConfig:
        if self.type == "s3" and not self.bucket:
            raise ConfigError("bucket: type s3 needs a bucket (or host_path: s3://bucket/prefix)")
        others = [f for t, fields in _TYPE_FIELDS.items() if t != self.type for f in fields
                  if getattr(self, f) is not None]
        if others:
            raise ConfigError(f"{', '.join(others)}: not a field of type {self.type} storage "
                              f"(its fields: {', '.join(_TYPE_FIELDS[self.type])})")
        if (self.access_key is None) != (self.secret_key is None):
            given = "access_key" if self.secret_key is None else "secret_key"
            raise ConfigError(f"{given}: given without "
                              f"{'secret_key' if given == 'access_key' else 'access_key'}; "
                              "give both, or neither for the standard credential chain "
                              "(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, ...)")
        return self

    def for_trials(self, default_dir: str | os.PathLike[str]) -> dict[str, Any]:
        """What a master's trials get: the config as given, a shared folder's
        ``host_path`` filled in with ``default_dir`` (the master's data directory) where
        the config has none; an object store as it is.

        >>> CheckpointStorageConfig().for_trials("/data/checkpoints")["host_path"]
        '/data/checkpoints'
        """
        given = self.model_dump(mode="json", exclude_none=True)
        if self.type == "shared_fs":
            given["host_path"] = self.host_path or str(default_dir)
        return given

    def printable(self) -> dict[str, Any]:
        """The config as JSON with its secrets masked: what describe output, stored run
        records and messages show."""
        return mask_secrets(self.model_dump(mode="json", exclude_none=True))

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
    if not isinstance(path, str) or not path or os.path.isabs(path) or "://" in path:
        return dict(raw), None  # a URL (s3://bucket/prefix) is no path
    resolved = os.path.normpath(os.path.join(os.path.abspath(config_dir),
                                             os.path.expanduser(path)))
    return {**raw, "checkpoint_storage": {**storage, "host_path": resolved}}, resolved


def mask_secrets(storage: Mapping[str, Any]) -> dict[str, Any]:
    """``storage`` (a ``checkpoint_storage`` mapping) with each secret given shown as
    :data:`MASK`.

    >>> mask_secrets({"type": "s3", "bucket": "b", "secret_key": "x", "access_key": None})
    {'type': 's3', 'bucket': 'b', 'secret_key': '********', 'access_key': None}
    """
    return {k: MASK if k in SECRET_FIELDS and v is not None else v for k, v in storage.items()}


def mask_config_secrets(config: Mapping[str, Any]) -> dict[str, Any]:
    """An experiment config (a mapping) with its ``checkpoint_storage`` secrets masked."""
    storage = config.get("checkpoint_storage")
    if not isinstance(storage, Mapping):
        return dict(config)
    return {**config, "checkpoint_storage": mask_secrets(storage)}
