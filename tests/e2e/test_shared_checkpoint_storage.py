"""Checkpoint storage that is safe to share (issue 22, items 3 to 5).

Real masters on 127.0.0.1 with the TensorFlow-free fake trial
(``tests/lifecycle_trial``), driven over HTTP with the trials' own task tokens.

- Two masters sharing one ``host_path``: each sweeps only the unrecorded checkpoint
  directories its own trials wrote (their owner file names its allocation); both keep
  and serve every recorded checkpoint.
- A reported uuid is a canonical lowercase UUID (400 naming ``uuid`` otherwise), and
  a task cannot report, and so have retention delete, a directory it did not write.
- A relative ``host_path`` is refused at create; ``det experiment create`` resolves it
  against the config file's directory.
"""

from __future__ import annotations

import base64
import io
import json
import tarfile
import uuid as uuidlib
from pathlib import Path

import pytest
import yaml

from det_sdk.master.archive import pack
from det_sdk.storage import OWNER_FILE
from harness.master import running_cluster, wait_until
from tests.lifecycle_harness import TRIAL_DIR, Fakes, config

# Stack-neutral: TensorFlow-free trials on the master's storage.
pytestmark = pytest.mark.stack_neutral


def _storage(host_path: Path, latest: int = 2) -> dict:
    return {"host_path": str(host_path), "save_trial_latest": latest, "save_trial_best": 0}


def _downloaded(fakes: Fakes, uuid: str) -> dict:
    """The checkpoint's state.json as the master's download serves it."""
    with fakes.http() as http:
        r = http.get(f"/api/v1/checkpoints/{uuid}/download")
    assert r.status_code == 200, r.text
    with tarfile.open(fileobj=io.BytesIO(r.content), mode="r:gz") as tar:
        assert f"./{OWNER_FILE}" not in tar.getnames()  # the master's bookkeeping
        return json.loads(tar.extractfile("./state.json").read())  # type: ignore[union-attr]


def test_two_masters_sharing_a_host_path_keep_each_others_checkpoints(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    shared = tmp_path_factory.mktemp("shared")
    with running_cluster(tmp_path_factory.mktemp("a")) as a, \
            running_cluster(tmp_path_factory.mktemp("b")) as b:
        fa, fb = Fakes(a, a.root / "control"), Fakes(b, b.root / "control")
        exp_a, trial_a, _ = fa.start_trial(checkpoint_storage=_storage(shared))
        exp_b, trial_b, _ = fb.start_trial(checkpoint_storage=_storage(shared))
        fa.send(trial_a, "report")
        kept_a = fa.send(trial_a, "checkpoint")["uuid"]
        orphan_a = fa.send(trial_a, "orphan_checkpoint")["uuid"]
        kept_b = fb.send(trial_b, "checkpoint")["uuid"]
        orphan_b = fb.send(trial_b, "orphan_checkpoint")["uuid"]
        assert json.loads((shared / kept_a / OWNER_FILE).read_text())["trial_id"] == trial_a
        # master a's trial ends while b's still runs: a sweeps the shared directory
        fa.send(trial_a, "finish")
        fa.wait_state(exp_a, "COMPLETED", "COMPLETED")
        wait_until("master a to sweep its own unrecorded checkpoint",
                   lambda: not (shared / orphan_a).exists(), timeout=10)
        assert (shared / kept_b).is_dir() and (shared / orphan_b).is_dir()  # b's: not a's
        fb.send(trial_b, "finish")
        fb.wait_state(exp_b, "COMPLETED", "COMPLETED")
        wait_until("master b to sweep its own unrecorded checkpoint",
                   lambda: not (shared / orphan_b).exists(), timeout=10)
        # both restarted: each sweeps at start-up too
        for c in (a, b):
            c.down()
            c.up()
        for fakes, uuid in ((fa, kept_a), (fb, kept_b)):
            assert (shared / uuid).is_dir()
            assert _downloaded(fakes, uuid) == {"steps": 1 if uuid == kept_a else 0}
        assert sorted(p.name for p in shared.iterdir()) == sorted([kept_a, kept_b])


BAD_UUIDS = ["tensorboard", "..", "../x", "0F5B6A1E-6BB4-4C37-9C43-5E0C3A3C2B11",
             "0f5b6a1e6bb44c379c435e0c3a3c2b11", "{0f5b6a1e-6bb4-4c37-9c43-5e0c3a3c2b11}",
             "0f5b6a1e-6bb4-4c37-9c43-5e0c3a3c2b11/..", "0f5b6a1e-6bb4-4c37-9c43-5e0c3a3c2b1",
             " 0f5b6a1e-6bb4-4c37-9c43-5e0c3a3c2b11", "0f5b6a1e-6bb4-4c37-9c43-5e0c3a3c2b11\n"]


def test_a_reported_uuid_is_a_uuid_and_retention_touches_only_the_trials_own(
        fakes: Fakes, tmp_path: Path) -> None:
    storage = tmp_path / "storage"
    board = storage / "tensorboard" / "1" / "trial_1"
    board.mkdir(parents=True)
    (board / "events").write_bytes(b"x")
    exp_a, trial_a, _ = fakes.start_trial(checkpoint_storage=_storage(storage, latest=1))
    exp_b, trial_b, _ = fakes.start_trial(checkpoint_storage=_storage(storage, latest=1))
    token = fakes.running_allocation(trial_a)["token"]
    report = {"trial_id": trial_a, "steps_completed": 1, "epoch": 0}
    with fakes.cluster.http(token=token) as task:
        for bad in BAD_UUIDS:
            r = task.post("/api/v1/checkpoints", json={**report, "uuid": bad})
            assert r.status_code == 400, (bad, r.text)
            [err] = r.json()["detail"]
            assert err["loc"] == ["body", "uuid"] and "[0-9a-f]{8}-" in err["msg"], err
        # a uuid-named directory this trial did not write: another trial's, or one
        # without an owner file (a local run's); neither can be taken over
        other = fakes.send(trial_b, "orphan_checkpoint")["uuid"]
        foreign = str(uuidlib.uuid4())
        (storage / foreign).mkdir()
        (storage / foreign / "weights").write_bytes(b"w")
        for uuid in (other, foreign):
            r = task.post("/api/v1/checkpoints", json={**report, "uuid": uuid})
            assert r.status_code == 409 and f"not written by trial {trial_a}" in r.text, r.text
    # the trial's own checkpoints: retention (latest 1) deletes the older one only
    first = fakes.send(trial_a, "checkpoint")["uuid"]
    second = fakes.send(trial_a, "checkpoint")["uuid"]
    assert not (storage / first).exists() and (storage / second).is_dir()
    assert (board / "events").is_file()
    assert (storage / other).is_dir() and (storage / foreign / "weights").is_file()
    with fakes.http() as http:
        recorded = {c["uuid"] for c in http.get(
            "/api/v1/checkpoints", params={"trial_id": trial_a}).json()["checkpoints"]}
    assert recorded == {second}
    for exp_id, trial_id in ((exp_a, trial_a), (exp_b, trial_b)):
        fakes.send(trial_id, "finish")
        fakes.wait_state(exp_id, "COMPLETED", "COMPLETED")
    # b's unrecorded directory is swept by its own master; the foreign one stays
    wait_until("the unrecorded checkpoint to go", lambda: not (storage / other).exists(),
               timeout=10)
    assert (storage / foreign / "weights").is_file() and (board / "events").is_file()


def test_a_relative_host_path_is_refused_at_create_and_resolved_by_the_cli(
        fakes: Fakes, tmp_path: Path) -> None:
    cfg = config(fakes.control, checkpoint_storage={"host_path": "ckpts"})
    archive = base64.b64encode(pack(TRIAL_DIR)).decode()
    with fakes.http() as http:
        r = http.post("/api/v1/experiments", json={"config": cfg, "model_definition": archive})
    assert r.status_code == 400, r.text
    assert "checkpoint_storage.host_path: 'ckpts' is a relative path; write an absolute path" \
        in r.json()["detail"]
    # the CLI resolves it against the config file's directory, and says so
    exp_dir = tmp_path / "exp"
    exp_dir.mkdir()
    (exp_dir / "fake.yaml").write_text(yaml.safe_dump(cfg))
    out = fakes.cluster.det("experiment", "create", str(exp_dir / "fake.yaml"), str(TRIAL_DIR),
                            "--json")
    assert out.returncode == 0, out.stderr
    assert f"resolved against {exp_dir / 'fake.yaml'}'s directory: {exp_dir / 'ckpts'}" \
        in out.stderr
    exp_id = json.loads(out.stdout)["id"]
    assert fakes.experiment(exp_id)["config"]["checkpoint_storage"]["host_path"] == \
        str(exp_dir / "ckpts")
    trial_id = fakes.trial_of(exp_id)["id"]
    fakes.wait_started(trial_id)
    uuid = fakes.send(trial_id, "checkpoint")["uuid"]
    fakes.send(trial_id, "finish")
    fakes.wait_state(exp_id, "COMPLETED", "COMPLETED")
    assert (exp_dir / "ckpts" / uuid / "state.json").is_file()  # outlives the trial
