"""Checkpoint storage: where checkpoints go and how many are kept.

Determined's ``checkpoint_storage`` as written: ``type: shared_fs`` (``host_path``),
``type: s3`` (``bucket``, ``prefix``, ``endpoint_url``, ``access_key``, ``secret_key``;
without keys the standard credential chain), ``type: gcs`` (``bucket``, ``prefix``;
credentials as Google's client finds them) or ``type: azure`` (``container``, and
``connection_string`` or ``account_url`` with an optional ``credential``; ``prefix`` is
det_sdk's), with the retention fields of all. A ``host_path`` written as a URL
(``s3://bucket/prefix``, ``gs://bucket/prefix``, ``az://container/prefix``) is the same
as that type with that bucket (container) and prefix.

    >>> CheckpointStorageConfig().save_trial_latest
    1
    >>> c = CheckpointStorageConfig(host_path="s3://ckpts/team/a")
    >>> (c.type, c.bucket, c.prefix)
    ('s3', 'ckpts', 'team/a')
    >>> c = CheckpointStorageConfig(type="s3", bucket="b", access_key="a", secret_key="s")
    >>> c.printable()["secret_key"]
    '********'
    >>> c = CheckpointStorageConfig(host_path="az://ckpts/run",
    ...                             connection_string="UseDevelopmentStorage=true")
    >>> (c.type, c.container, c.prefix, c.printable()["connection_string"])
    ('azure', 'ckpts', 'run', '********')
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
SECRET_FIELDS = ("access_key", "secret_key", "connection_string", "credential")
#: the fields of each storage type (the retention fields belong to all)
_TYPE_FIELDS = {"shared_fs": ("host_path",),
                "s3": ("bucket", "prefix", "endpoint_url", "access_key", "secret_key"),
                "gcs": ("bucket", "prefix"),
                "azure": ("container", "prefix", "connection_string", "account_url",
                          "credential")}
#: ``host_path`` URL schemes, and the type each means
URL_TYPES = {"s3://": "s3", "gs://": "gcs", "az://": "azure"}


class CheckpointStorageConfig(_Strict):
    """Where checkpoints go and how many are kept."""

    type: Literal["shared_fs", "s3", "gcs", "azure"] = "shared_fs"
    host_path: str | None = None
    # type: s3 (Determined's fields)
    bucket: str | None = None
    prefix: str | None = None
    endpoint_url: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    # type: azure (Determined's fields; prefix is det_sdk's, for az://container/prefix)
    container: str | None = None
    connection_string: str | None = None
    account_url: str | None = None
    credential: str | None = None
    save_trial_latest: Annotated[int, _within(0, 1_000_000)] = 1
    save_trial_best: Annotated[int, _within(0, 1_000_000)] = 1
    save_experiment_best: Annotated[int, _within(0, 1_000_000)] = 0

    @model_validator(mode="before")
    @classmethod
    def _url_form(cls, data: Any) -> Any:
        """``host_path: s3://bucket/prefix`` is ``type: s3`` with that bucket and prefix
        (``gs://`` ``type: gcs``; ``az://container/prefix`` ``type: azure``)."""
        path = data.get("host_path") if isinstance(data, Mapping) else None
        scheme = next((u for u in URL_TYPES if isinstance(path, str) and path.startswith(u)),
                      None)
        if scheme is None or not isinstance(path, str):
            return data
        kind = URL_TYPES[scheme]
        location, _, prefix = path[len(scheme):].partition("/")
        data = {k: v for k, v in data.items() if k != "host_path"}
        if data.setdefault("type", kind) != kind:
            raise ConfigError(f"host_path: a {scheme} URL with type {data['type']!r}; "
                              f"write type: {kind} or leave type out")
        data["container" if kind == "azure" else "bucket"] = location
        data["prefix"] = prefix.strip("/") or None
        return data

    @model_validator(mode="after")
    def _fields_of_type(self) -> CheckpointStorageConfig:
        own = _TYPE_FIELDS[self.type]
        others = sorted({f for fields in _TYPE_FIELDS.values() for f in fields
                         if f not in own and getattr(self, f) is not None})
        if others:
            raise ConfigError(f"{', '.join(others)}: not a field of type {self.type} storage "
                              f"(its fields: {', '.join(own)})")
        if self.type in ("s3", "gcs") and not self.bucket:
            scheme = next(u for u, t in URL_TYPES.items() if t == self.type)
            raise ConfigError(f"bucket: type {self.type} needs a bucket (or host_path: "
                              f"{scheme}bucket/prefix)")
        if self.type == "azure":
            self._check_azure()
        if (self.access_key is None) != (self.secret_key is None):
            given = "access_key" if self.secret_key is None else "secret_key"
            raise ConfigError(f"{given}: given without "
                              f"{'secret_key' if given == 'access_key' else 'access_key'}; "
                              "give both, or neither for the standard credential chain "
                              "(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, ...)")
        return self

    def _check_azure(self) -> None:
        """Determined's rule: a container, and ``connection_string`` or ``account_url``
        (with ``credential``, or none for the environment's), never both."""
        if not self.container:
            raise ConfigError("container: type azure needs a container (or host_path: "
                              "az://container/prefix)")
        if (self.connection_string is None) == (self.account_url is None):
            raise ConfigError("connection_string, account_url: type azure needs exactly one "
                              f"of them ({'both' if self.connection_string else 'neither'} "
                              "given)")
        if self.credential is not None and self.account_url is None:
            raise ConfigError("credential: goes with account_url (a connection_string "
                              "carries its own key)")
        if self.account_url is not None and not self.account_url.startswith(
                ("https://", "http://")):
            raise ConfigError(f"account_url: {self.account_url!r} is not an http(s) URL "
                              "(https://<account>.blob.core.windows.net)")
        if self.connection_string is not None:
            from det_sdk.config.azure_strings import parse_connection_string

            parse_connection_string(self.connection_string)  # raises naming the field

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
