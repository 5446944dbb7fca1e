"""checkpoint_storage's object-store forms (issue 47): Determined's ``type: s3`` fields, the
``s3://bucket/prefix`` URL form, refusals naming the field, and secrets masked wherever
a config is shown or stored."""

from __future__ import annotations

import json

import pytest

from det_sdk.config import ConfigError, parse_experiment_config
from det_sdk.config.storage import MASK, CheckpointStorageConfig, resolve_host_path
from det_sdk.session import LocalSession
from det_sdk.storage import SharedFSStorage, open_storage

SECRET = "s3cr3t-Vx9Q"


def test_determined_s3_config_as_written_parses() -> None:
    cfg = parse_experiment_config({"checkpoint_storage": {
        "type": "s3", "bucket": "ckpts", "prefix": "team", "endpoint_url": "http://h:9000",
        "access_key": "AK", "secret_key": SECRET, "save_trial_best": 2}})
    s = cfg.checkpoint_storage
    assert (s.type, s.bucket, s.prefix, s.endpoint_url, s.save_trial_best) == (
        "s3", "ckpts", "team", "http://h:9000", 2)
    assert s.printable()["secret_key"] == MASK and s.printable()["access_key"] == MASK
    assert SECRET not in json.dumps(s.printable())


def test_url_form_is_type_s3() -> None:
    s = CheckpointStorageConfig(host_path="s3://ckpts/a/b/")
    assert (s.type, s.bucket, s.prefix, s.host_path) == ("s3", "ckpts", "a/b", None)
    assert CheckpointStorageConfig(host_path="s3://ckpts").prefix is None
    # a URL is no relative path for `det experiment create` to resolve
    assert resolve_host_path({"checkpoint_storage": {"host_path": "s3://b/p"}}, "/exp")[1] is None


@pytest.mark.parametrize(("storage", "field"), [
    ({"type": "s3"}, "bucket"),
    ({"type": "s3", "bucket": "b", "host_path": "/x"}, "host_path"),
    ({"type": "shared_fs", "bucket": "b"}, "bucket"),
    ({"type": "s3", "bucket": "b", "access_key": "AK"}, "access_key"),
    ({"type": "s3", "bucket": "b", "secret_key": SECRET}, "secret_key"),
    ({"type": "hdfs", "bucket": "b"}, "type"),
])
def test_bad_storage_refused_naming_the_field_never_the_secret(storage: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field) as err:
        parse_experiment_config({"checkpoint_storage": storage})
    assert SECRET not in str(err.value)


def test_shared_fs_unchanged_and_local_run_records_no_secret(tmp_path) -> None:
    assert isinstance(open_storage(None, tmp_path), SharedFSStorage)
    assert open_storage({"host_path": str(tmp_path)}).describe() == str(tmp_path)
    # a local run keeps its shared_fs checkpoints in its own folder, whatever host_path says
    run = LocalSession.create(tmp_path / "runs", hparams={}, seed=0,
                              config={"checkpoint_storage": {"host_path": "/elsewhere"}})
    assert run.storage.describe() == str(run.run_dir / "checkpoints")
    run.close()
    # run.json holds the config with its secrets masked
    stored = {"checkpoint_storage": {"type": "s3", "bucket": "b", "access_key": "AK",
                                     "secret_key": SECRET}}
    from det_sdk.config.storage import mask_config_secrets

    masked = mask_config_secrets(stored)
    assert masked["checkpoint_storage"]["secret_key"] == MASK
    assert stored["checkpoint_storage"]["secret_key"] == SECRET  # the caller's untouched
