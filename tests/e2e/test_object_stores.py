"""The object-store seam's contract on S3, GCS and Azure alike, each against a real server
the module starts once: SeaweedFS (S3), fake-gcs-server (GCS, through
``STORAGE_EMULATOR_HOST``), Azurite (Azure). No mock at the storage boundary: det_sdk's
obstore client talks each store's protocol to its server.

Checkpoints go through det.core's ``checkpoint`` upload/download (no TensorFlow): stored,
listed, read back verified, a flipped byte found, deleted, kept by retention, refused
with a wrong credential (or, for fake-gcs-server, which checks none, a missing bucket),
and a kill -9 mid-upload leaves nothing listed. The probe runs at ``init()`` and at a
master's experiment create (an in-process master: no trial started).

Per store too: a Keras fit stopped by SIGTERM and resumed from the store equals the
uninterrupted run (one reference run on local disk for the module), and a master (one
per store: it must see ``STORAGE_EMULATOR_HOST``) keeps its fake trials' checkpoints
there: retention, a model version, downloads verified (the API's and the Python
client's), secrets masked.
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

from harness.master import Cluster, running_cluster, wait_until
from tests.object_servers import started
from tests.seaweedfs import ACCESS_KEY, SECRET_KEY
from tests.support import SCRIPTS, pid_gone, read_jsonl, run_python

pytest.importorskip("obstore")
# Every test but the Keras fit's is marked stack_neutral (det.core, the stores, the master:
# no Keras). The fit runs on both stacks on S3; on GCS and Azure on the first stack only
# (their params are marked): what Keras does is the same above any store (one seam,
# det_sdk.storage), and the S3 run already shows it on Keras 2.
neutral = pytest.mark.stack_neutral

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
    #: what the config holds that no output may show (masked as ********)
    secrets: tuple[str, ...] = ()

    def url_of(self, prefix: str) -> str:
        """The describe() form of ``prefix``."""
        return f"{self.url[:-2]}/{prefix}"


def _keys(storage: Any) -> list[str]:
    """Every object under the storage's prefix (obstore's listing of det_sdk's store)."""
    import obstore

    return sorted(o["path"] for batch in obstore.list(storage._store) for o in batch)


@pytest.fixture(scope="module", params=["s3", pytest.param("gcs", marks=neutral),
                                        pytest.param("azure", marks=neutral)])
def store(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    kind = request.param
    with started(kind, tmp_path_factory, BUCKET) as server:
        if kind == "s3":
            s3 = server

            def s3_config(prefix: str, secret: str = SECRET_KEY) -> dict[str, Any]:
                return {"type": "s3", "bucket": BUCKET, "prefix": prefix,
                        "endpoint_url": s3.endpoint_url, "access_key": ACCESS_KEY,
                        "secret_key": secret}
            yield Store(kind, s3_config, (s3_config("refused", WRONG),
                                          "checkpoint_storage.access_key / secret_key", WRONG),
                        f"s3://{BUCKET}/p", (SECRET_KEY, ACCESS_KEY))
        elif kind == "gcs":
            # fake-gcs-server checks no credential: a missing bucket is what it refuses
            yield Store(kind, lambda prefix: {"host_path": f"gs://{BUCKET}/{prefix}"},
                        ({"type": "gcs", "bucket": "det-sdk-no-such-bucket"},
                         "checkpoint_storage.bucket", None), f"gs://{BUCKET}/p")
        else:
            az = server
            yield Store(kind, lambda prefix: {"host_path": f"az://{BUCKET}/{prefix}",
                                              "connection_string": az.connection_string},
                        ({"type": "azure", "container": BUCKET, "account_url": az.account_url,
                          "credential": WRONG}, "checkpoint_storage.credential", WRONG),
                        f"az://{BUCKET}/p", (az.key,))


@neutral
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
    # multipart: 3 parts of at most 8 MiB (on GCS, XML multipart: tests/fake_gcs.py serves it)
    size = 20 << 20
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


@neutral
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


_RETIRER = textwrap.dedent("""
    import json, sys, time
    from det_sdk.storage import open_storage
    storage = open_storage(json.loads(sys.argv[1]))
    storage.retire(sys.argv[2])  # unlisted; its objects left for what it returns
    print("retired", flush=True)
    time.sleep(600)  # killed here, as a master mid-delete
""")


def _kill_mid_delete(store: Store, uuid: str, tmp_path: Path, prefix: str = "master") -> None:
    """Checkpoint ``uuid`` (under ``prefix``) retired by a process killed with SIGKILL
    before it removed the objects."""
    import json

    proc = subprocess.Popen(
        [sys.executable, "-c", _RETIRER, json.dumps(store.config(prefix)), uuid],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "retired"
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(10) == -signal.SIGKILL


@neutral
def test_kill_9_mid_delete_leaves_it_unlisted_and_the_next_sweep_removes_the_rest(
        store: Store, tmp_path: Path) -> None:
    """A master killed while it deletes a checkpoint: the checkpoint is unlisted at once,
    and the objects left are removed by the next sweep on this host (a restarted master's,
    or a save's), not a day later. Another checkpoint stays whole."""
    from det_sdk.storage import open_storage

    storage = open_storage(store.config("deleting"))
    uuids = []
    for _ in range(2):
        with storage.store() as (uuid, path):
            for i in range(5):
                (path / f"w{i}.bin").write_bytes(os.urandom(1 << 16))
        uuids.append(uuid)
    doomed, kept = uuids
    _kill_mid_delete(store, doomed, tmp_path, prefix="deleting")
    assert storage.list() == [kept]
    left = [k for k in _keys(storage) if k.startswith(f"{doomed}/")]
    assert any(k.endswith(".bin") for k in left), left
    open_storage(store.config("deleting")).sweep_abandoned()  # what the next sweep runs
    assert not [k for k in _keys(storage) if k.startswith(doomed)], _keys(storage)
    assert storage.list() == [kept]
    out = tmp_path / "kept"
    storage.download(kept, out)  # whole and verified
    assert sorted(p.name for p in out.iterdir()) == [f"w{i}.bin" for i in range(5)]
    storage.delete(kept)
    assert _keys(storage) == []


@neutral
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


# --- a Keras fit stopped and resumed from the store ----------------------------------------

@pytest.fixture(scope="module")
def keras_reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted run's final weights (local disk: the store changes no bit)."""
    tmp = tmp_path_factory.mktemp("keras_reference")
    full = run_python(SCRIPTS / "tiny_train.py", {
        "DET_RUNS_DIR": str(tmp / "runs"), "TINY_EPOCHS": "2",
        "TINY_WEIGHTS_OUT": str(tmp / "full.npz")})
    assert full.returncode == 0, full.stderr[-3000:]
    return tmp / "full.npz"


def test_fit_stopped_by_sigterm_and_resumed_from_the_store_equals_uninterrupted(
        store: Store, keras_reference: Path, tmp_path: Path) -> None:
    """Stopped mid-epoch by SIGTERM, resumed from the store: the uninterrupted bits;
    retention (latest 1) leaves exactly the last checkpoint's objects, no copy stays on
    local disk, no secret is written, and a later run finds the checkpoint there."""
    import numpy as np
    import yaml

    from det_sdk.session import LocalSession
    from det_sdk.storage import open_storage

    storage_cfg = {**store.config("fit"), "save_trial_latest": 1, "save_trial_best": 0}
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"checkpoint_storage": storage_cfg}))

    def run(name: str, **env: str) -> subprocess.CompletedProcess[str]:
        scratch = tmp_path / f"tmp-{name}"  # the process's TMPDIR: must be empty after
        scratch.mkdir()
        out = run_python(SCRIPTS / "tiny_train.py", {
            "DET_RUNS_DIR": str(tmp_path / "runs"), "DET_CONFIG": str(config),
            "TINY_EPOCHS": "2", "TMPDIR": str(scratch), **env})
        assert out.returncode == 0, out.stderr[-3000:]
        return out

    stopped = run("stopped", TINY_STOP_AT="0:5")
    assert "stopped by SIGTERM" in stopped.stderr
    resumed = run("resumed", DET_RESUME="1", TINY_WEIGHTS_OUT=str(tmp_path / "resumed.npz"))
    assert "epochs run: [0, 1]" in resumed.stdout  # resumed mid-epoch 0

    full_w, resumed_w = np.load(keras_reference), np.load(tmp_path / "resumed.npz")
    assert list(full_w) == list(resumed_w)
    for k in full_w:
        np.testing.assert_array_equal(full_w[k], resumed_w[k])

    run_dir = tmp_path / "runs" / "1"
    rows = read_jsonl(run_dir / "checkpoints.jsonl")
    assert (rows[0]["epoch"], rows[0]["batch"]) == (0, 5)  # the SIGTERM's checkpoint
    storage = open_storage(store.config("fit"))
    assert storage.list() == [rows[-1]["uuid"]]
    assert {k.split("/", 1)[0].split(".", 1)[0] for k in _keys(storage)} == {rows[-1]["uuid"]}
    # no local copy anywhere: not in the run's folder, not in the processes' TMPDIRs
    assert not (run_dir / "checkpoints").exists() or not any((run_dir / "checkpoints").iterdir())
    for name in ("stopped", "resumed"):
        assert not any((tmp_path / f"tmp-{name}").iterdir()), list(
            (tmp_path / f"tmp-{name}").iterdir())
    # the secrets are on no disk the run wrote, nor in its output
    for text in [*(p.read_text() for p in run_dir.glob("*.json*")), stopped.stderr,
                 resumed.stderr, resumed.stdout]:
        assert not [s for s in store.secrets if s in text]
    if store.secrets:
        assert "********" in (run_dir / "run.json").read_text()
    # a later run with the same storage finds run 1's checkpoint in the store (as a batch
    # inference script's load_checkpoint_model(trial_id=1) does), downloaded and verified
    later = LocalSession.create(tmp_path / "runs", hparams={}, seed=0, config={},
                                storage_config=store.config("fit"))
    assert later.checkpoint_for_trial(1) == rows[-1]["uuid"]
    local = later.checkpoint_path(rows[-1]["uuid"])
    assert (local / "metadata.json").is_file() and (local / "state.bin").is_file()
    later.close()
    assert not local.exists()  # the downloaded copy goes with the session


# --- a master's checkpoints in the store ---------------------------------------------------

@pytest.fixture(scope="module")
def cluster(store: Store, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One master per store (this module's, in place of conftest's): started after the
    store's server, so that it and its trials see ``STORAGE_EMULATOR_HOST``."""
    with running_cluster(tmp_path_factory.mktemp("cluster")) as c:
        yield c


@neutral
def test_master_keeps_checkpoints_in_the_store_versions_and_downloads_verified(
        store: Store, fakes: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A master's experiments with their checkpoints in the store (fake trials store
    through the seam): describe masks the secrets; a trial cannot take over (and so have
    retention delete) another's checkpoint; retention deletes a dropped checkpoint's
    objects but keeps a model version's; the version's checkpoint downloads through the
    Python client, verified; an altered object is a 409 naming the file, to the API's
    download (`det checkpoint download`) and to the client's."""
    import io
    import json
    import tarfile

    import obstore

    from det_sdk.client import MasterError
    from det_sdk.experimental.client import Determined
    from det_sdk.storage import open_storage

    storage_cfg = {**store.config("master"), "save_trial_latest": 1, "save_trial_best": 0}
    exp_a, trial_a, _ = fakes.start_trial(checkpoint_storage=storage_cfg)
    _, trial_b, _ = fakes.start_trial(checkpoint_storage=storage_cfg)
    described = json.dumps(fakes.experiment(exp_a))
    assert not [s for s in store.secrets if s in described]
    assert not store.secrets or "********" in described

    fakes.send(trial_a, "report")  # steps 1
    first = fakes.send(trial_a, "checkpoint")["uuid"]
    other = fakes.send(trial_b, "orphan_checkpoint")["uuid"]  # stored, never reported
    storage = open_storage(store.config("master"))
    assert sorted(storage.list()) == sorted([first, other])
    assert storage.read_owner(first)["trial_id"] == trial_a
    # trial a reports b's as its own (to have retention delete it): refused, b's stay
    token = fakes.running_allocation(trial_a)["token"]
    with fakes.cluster.http(token=token) as task:
        r = task.post("/api/v1/checkpoints", json={"uuid": other, "trial_id": trial_a,
                                                   "steps_completed": 1, "epoch": 0})
        assert r.status_code == 409 and f"not written by trial {trial_a}" in r.text, r.text
    fakes.send(trial_a, "report")  # steps 2
    second = fakes.send(trial_a, "checkpoint")["uuid"]  # retention (latest 1) drops first
    assert sorted(storage.list()) == sorted([second, other])
    assert not [k for k in _keys(storage) if k.startswith(first)]

    # the master killed and started again: it reaches the bucket with the credentials it
    # kept (describe shows them masked), adopts the running trial, and its retention and
    # downloads below are the restarted master's
    master_pid = int((fakes.cluster.data_dir / "master.pid").read_text())
    os.kill(master_pid, signal.SIGKILL)
    wait_until("the master to die", lambda: pid_gone(master_pid))
    fakes.cluster.up()

    # a model version points at the second; the third checkpoint leaves it there
    monkeypatch.setenv("DET_USER_TOKEN", fakes.cluster.token)
    client = Determined(fakes.cluster.url)
    model = client.create_model(f"in-{store.kind}")
    assert model.register_version(second).checkpoint_uuid == second
    fakes.send(trial_a, "report")  # steps 3
    third = fakes.send(trial_a, "checkpoint")["uuid"]
    assert sorted(storage.list()) == sorted([second, third, other])
    version = client.get_model(f"in-{store.kind}").get_version()
    assert version is not None and version.checkpoint_uuid == second
    path = version.checkpoint.download(str(tmp_path / "version"))
    assert json.loads((Path(path) / "state.json").read_text()) == {"steps": 2}
    assert not (Path(path) / ".det_sdk-owner.json").exists()

    raw = storage._store  # type: ignore[attr-defined]  # obstore's handle, for the change
    with fakes.http() as http:
        info = http.get(f"/api/v1/checkpoints/{third}").json()
        assert info["path"] == f"{store.url_of('master')}/{third}", info
        # the lists (`det checkpoint list`) say where too: the bucket, not the master's disk
        listed = http.get(f"/api/v1/trials/{trial_a}/checkpoints").json()
        assert [c["path"] for c in listed] == [
            f"{store.url_of('master')}/{u}" for u in (second, third)], listed
        r = http.get(f"/api/v1/checkpoints/{third}/download")
        assert r.status_code == 200, r.text
        with tarfile.open(fileobj=io.BytesIO(r.content), mode="r:gz") as tar:
            assert json.loads(tar.extractfile("./state.json").read()) == {"steps": 3}
            assert "./.det_sdk-owner.json" not in tar.getnames()
        obstore.put(raw, f"{second}/state.json", b'{"steps": 9}')  # same size, altered
        r = http.get(f"/api/v1/checkpoints/{second}/download")
        assert r.status_code == 409 and "state.json" in r.text, r.text
    with pytest.raises(MasterError, match=r"state\.json"):
        version.checkpoint.download(str(tmp_path / "altered"))
    obstore.put(raw, f"{second}/state.json", b'{"steps": 2}')
    # a checkpoint whose deletion was cut short by a kill -9 (as a master's before its
    # restart): unlisted, its objects left with a dead process's mark
    with storage.store() as (cut_short, path):
        (path / "w.bin").write_bytes(os.urandom(1 << 16))
    _kill_mid_delete(store, cut_short, tmp_path)
    assert [k for k in _keys(storage) if k.startswith(f"{cut_short}/")]
    for trial in (trial_a, trial_b):
        fakes.send(trial, "finish")
    fakes.wait_state(exp_a, "COMPLETED", "COMPLETED")
    # no trial saves there any more: b's checkpoint, stored whole but never reported (as
    # if b was killed between its manifest and its report), is swept with its objects;
    # the recorded ones stay
    wait_until("the unreported checkpoint swept", lambda: other not in storage.list(),
               timeout=60)
    assert sorted(storage.list()) == sorted([second, third])
    wait_until("its objects gone", lambda: not [k for k in _keys(storage)
                                                 if k.startswith(other)], timeout=30)
    # the master's sweep took the cut-short deletion's objects too
    wait_until("the cut-short deletion's objects gone", lambda: not [
        k for k in _keys(storage) if k.startswith(cut_short)], timeout=30)
