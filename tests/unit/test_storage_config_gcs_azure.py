"""checkpoint_storage's GCS and Azure forms (issue 47): Determined's ``type: gcs`` and
``type: azure`` fields, the ``gs://`` and ``az://`` URL forms, refusals naming the field
(never the secret), and connection strings and credentials masked as S3's keys are."""

from __future__ import annotations

import json

import pytest

from det_sdk.config import ConfigError, parse_experiment_config
from det_sdk.config.azure_strings import account_of_url, parse_connection_string
from det_sdk.config.storage import MASK, CheckpointStorageConfig, mask_config_secrets

KEY = "c2VjcmV0LWtleS1Wx9Q="
CONN = f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={KEY};" \
       "EndpointSuffix=core.windows.net"


def test_determined_gcs_config_and_its_url_form() -> None:
    s = parse_experiment_config({"checkpoint_storage": {
        "type": "gcs", "bucket": "ckpts", "prefix": "team", "save_trial_latest": 3}}
    ).checkpoint_storage
    assert (s.type, s.bucket, s.prefix, s.save_trial_latest) == ("gcs", "ckpts", "team", 3)
    u = CheckpointStorageConfig(host_path="gs://ckpts/a/b/")
    assert (u.type, u.bucket, u.prefix, u.host_path) == ("gcs", "ckpts", "a/b", None)
    assert CheckpointStorageConfig(host_path="gs://ckpts").prefix is None


def test_determined_azure_configs_and_the_url_form_mask_their_secrets() -> None:
    s = parse_experiment_config({"checkpoint_storage": {
        "type": "azure", "container": "ckpts", "connection_string": CONN}}).checkpoint_storage
    assert (s.type, s.container, s.prefix) == ("azure", "ckpts", None)
    assert s.printable()["connection_string"] == MASK and KEY not in json.dumps(s.printable())
    a = CheckpointStorageConfig(type="azure", container="ckpts",
                                account_url="https://acct.blob.core.windows.net", credential=KEY)
    assert a.printable()["credential"] == MASK and KEY not in json.dumps(a.printable())
    masked = mask_config_secrets({"checkpoint_storage": a.model_dump(exclude_none=True)})
    assert KEY not in json.dumps(masked)
    u = CheckpointStorageConfig(host_path="az://ckpts/runs/a", connection_string=CONN)
    assert (u.type, u.container, u.prefix) == ("azure", "ckpts", "runs/a")
    # without a credential: the environment's (AZURE_*), as Determined's client finds it
    assert CheckpointStorageConfig(type="azure", container="ckpts",
                                   account_url="https://acct.blob.core.windows.net").credential \
        is None


@pytest.mark.parametrize(("storage", "field"), [
    ({"type": "gcs"}, "bucket"),
    ({"type": "gcs", "bucket": "b", "endpoint_url": "http://h"}, "endpoint_url"),
    ({"type": "gcs", "bucket": "b", "container": "c"}, "container"),
    ({"type": "azure", "connection_string": CONN}, "container"),
    ({"type": "azure", "container": "ckpts"}, "connection_string, account_url"),
    ({"type": "azure", "container": "ckpts", "connection_string": CONN,
      "account_url": "https://acct.blob.core.windows.net"}, "connection_string, account_url"),
    ({"type": "azure", "container": "ckpts", "connection_string": CONN, "credential": KEY},
     "credential"),
    ({"type": "azure", "container": "ckpts", "account_url": "acct.blob", "credential": KEY},
     "account_url"),
    ({"type": "azure", "container": "ckpts", "connection_string": f"AccountName=a;Key={KEY}"},
     "connection_string"),
    ({"type": "azure", "container": "ckpts", "connection_string": KEY}, "connection_string"),
    ({"type": "azure", "container": "c", "bucket": "b", "connection_string": CONN}, "bucket"),
    ({"type": "s3", "host_path": "gs://b/p"}, "host_path"),
    ({"type": "gcs", "host_path": "az://c/p"}, "host_path"),
])
def test_bad_storage_refused_naming_the_field_never_the_secret(storage: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field) as err:
        parse_experiment_config({"checkpoint_storage": storage})
    assert KEY not in str(err.value)


def test_connection_string_parts() -> None:
    c = parse_connection_string(CONN)
    assert (c.account_name, c.account_key, c.blob_endpoint, c.sas_token) == (
        "acct", KEY, "https://acct.blob.core.windows.net", None)
    sas = parse_connection_string("BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;"
                                  "SharedAccessSignature=sv=2021&sig=abc")
    assert (sas.account_name, sas.sas_token, sas.account_key) == (
        "devstoreaccount1", "sv=2021&sig=abc", None)
    dev = parse_connection_string("UseDevelopmentStorage=true")
    assert dev.blob_endpoint == "http://127.0.0.1:10000/devstoreaccount1"
    assert account_of_url("https://acct.blob.core.windows.net/") == "acct"
