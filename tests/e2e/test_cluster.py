"""The cluster: a real master on 127.0.0.1, driven by the real `det` CLI and httpx.

One master serves the module (starting one costs seconds); each test makes its own
experiments. Trials are real processes running real TensorFlow.
"""

from __future__ import annotations

import base64
import io
import json
import os
import sqlite3
import subprocess
import tarfile
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import yaml

from harness.master import (
    DET,
    MODEL_DIR,
    Cluster,
    create,
    describe,
    free_port,
    trial_logs,
    wait_until,
)
from tests.e2e._suite3_reads import checkpoints, experiment_count
from tests.support import REPO

# Stack-neutral: the master's scheduling, restarts and retention; the Keras trial's own
# resume runs on both stacks in test_local_training.py and test_horovod.py.
pytestmark = pytest.mark.stack_neutral


def test_example_trains_on_the_cluster_then_batch_inference(cluster: Cluster,
                                                            mnist_npz: Path) -> None:
    config = yaml.safe_load((REPO / "examples" / "const.yaml").read_text())
    config["searcher"]["max_length"] = {"epochs": 2}
    config["checkpoint_storage"] = {"save_trial_latest": 100}
    # issue 23: the script reads MNIST_NPZ, set by the config's environment_variables
    config["environment"] = {"environment_variables": [f"MNIST_NPZ={mnist_npz}"],
                             "image": "determinedai/environments:tf"}
    assert "MNIST_NPZ" not in os.environ  # nor does the master inherit it
    path = cluster.root / "const.yaml"
    # numbers as Determined's configs write them (YAML 1.2 floats, not '5e-2' and '.5')
    text = yaml.safe_dump(config).replace("learning_rate: 0.1", "learning_rate: 5e-2")
    path.write_text(text.replace("dropout: 0.5", "dropout: .5"))
    assert "learning_rate: 5e-2" in path.read_text() and "dropout: .5" in path.read_text()

    out = cluster.det("experiment", "create", str(path), str(REPO / "examples"), "--follow")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    exp_id = int(out.stdout.split("Created experiment ")[1].split()[0])
    exp = describe(cluster, exp_id)
    assert exp["state"] == "COMPLETED"
    (trial,) = exp["trials"]
    assert trial["state"] == "COMPLETED" and trial["epoch"] == 2 and trial["progress"] == 1.0

    # metrics through the CLI and through the API agree
    cli = json.loads(cluster.det("trial", "describe", str(trial["id"]), "--json").stdout)
    assert cli["hparams"]["learning_rate"] == 0.05 and cli["hparams"]["dropout"] == 0.5
    with cluster.http() as http:
        api = http.get(f"/api/v1/trials/{trial['id']}/metrics").json()
    assert cli["metrics"] == api
    assert [(m["group"], m["epoch"]) for m in api] == [
        ("training", 1), ("validation", 1), ("training", 2), ("validation", 2)]
    ckpts = json.loads(cluster.det("checkpoint", "list", "--trial", str(trial["id"]),
                                   "--json").stdout)
    assert [c["epoch"] for c in ckpts] == [1, 2]

    # batch inference on the trained trial, as a generic job on 2 Horovod processes
    job = {"entrypoint_script": "python3 batch_inference.py", "resources": {"slots": 2},
           "data": {"trial_id": trial["id"], "batch_size": 32,
                    # relative, as examples/batch_inference.yaml: kept with the job's files
                    "predictions_path": "predictions.npy"},
           # Determined's per-device form: det_sdk's slots are CPUs, `cpu` applies
           "environment": {"environment_variables": {"cpu": [f"MNIST_NPZ={mnist_npz}"],
                                                     "cuda": ["MNIST_NPZ=/nowhere"]}}}
    job_path = cluster.root / "bi.yaml"
    job_path.write_text(yaml.safe_dump(job))
    out = cluster.det("job", "run", str(job_path), str(REPO / "examples"), "--follow")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    job_id = out.stdout.split("Created job ")[1].split()[0]
    got = cluster.det("job", "download", job_id, str(cluster.root / "job-files"))
    assert got.returncode == 0, got.stderr
    preds = np.load(cluster.root / "job-files" / "predictions.npy")

    from det_sdk.keras._checkpoint import load_model

    model = load_model(Path(ckpts[-1]["path"]))
    with np.load(mnist_npz) as f:
        x = np.expand_dims(f["x_test"].astype("float32") / 255, -1)
    np.testing.assert_allclose(preds, model.predict(x, verbose=0), atol=1e-6)
    jobs = json.loads(cluster.det("job", "batches", "--json").stdout)
    assert jobs[-1]["state"] == "COMPLETED"


def test_two_slots_run_horovod_and_checkpoint_once(cluster: Cluster) -> None:
    config = cluster.write_config("two-slots", resources={"slots_per_trial": 2})
    exp_id = create(cluster, config)
    out = cluster.det("experiment", "wait", str(exp_id))
    assert out.returncode == 0, cluster.det("experiment", "logs", str(exp_id)).stdout[-3000:]
    (trial,) = describe(cluster, exp_id)["trials"]
    logs = cluster.det("trial", "logs", str(trial["id"])).stdout
    assert "rank 0 done" in logs and "rank 1 done" in logs
    ckpts = json.loads(cluster.det("checkpoint", "list", "--trial", str(trial["id"]),
                                   "--json").stdout)
    assert [c["epoch"] for c in ckpts] == [1, 2]  # one writer: one checkpoint per epoch
    # 160 samples, global batch 16: 10 steps per epoch whatever the number of processes
    assert trial["steps_completed"] == 20


def test_a_crashing_trial_restarts_from_its_checkpoint(cluster: Cluster,
                                                       five_epochs: int) -> None:
    (trial,) = describe(cluster, five_epochs)["trials"]  # crashed once, after epoch 2
    assert trial["restarts"] == 1 and trial["state"] == "COMPLETED"
    with cluster.http() as http:
        rows = http.get(f"/api/v1/trials/{trial['id']}/metrics").json()
    keys = [(r["group"], r["steps_completed"]) for r in rows]
    assert len(keys) == len(set(keys)) == 10  # one value per group and step
    assert trial["steps_completed"] == 50  # and it trained to its length


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"bogus_key": 1}, "bogus_key: unknown field"),
        ({"resources": {"slots_per_trial": "two"}}, "resources.slots_per_trial"),
        ({"searcher": {"name": "random", "metric": "val_loss"}}, "searcher.max_trials"),
        ({"hyperparameters": {"lr": {"type": "double", "minval": 2, "maxval": 1}}},
         "hyperparameters.lr"),
        ({"entrypoint_script": None}, "entrypoint_script"),
    ],
)
def test_invalid_configs_are_refused_with_their_field(cluster: Cluster, overrides: dict,
                                                      expected: str) -> None:
    # counted in this process: the subject is `det experiment create`'s refusal
    before = experiment_count(cluster)
    config = cluster.write_config("bad", **overrides)
    if overrides.get("entrypoint_script", "x") is None:
        raw = yaml.safe_load(config.read_text())
        raw.pop("entrypoint_script")
        config.write_text(yaml.safe_dump(raw))
    out = cluster.det("experiment", "create", str(config), str(MODEL_DIR))
    assert out.returncode != 0
    assert expected in out.stderr
    assert experiment_count(cluster) == before


def test_missing_model_directory(cluster: Cluster) -> None:
    out = cluster.det("experiment", "create", str(cluster.write_config("nodir")),
                      str(cluster.root / "no-such-dir"))
    assert out.returncode != 0 and "does not exist" in out.stderr


def _tar(members: list[tarfile.TarInfo], payload: bytes = b"print('hi')\n") -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for m in members:
            if m.isfile():
                m.size = len(payload)
                tar.addfile(m, io.BytesIO(payload))
            else:
                tar.addfile(m)
    return base64.b64encode(buf.getvalue()).decode()


def _link(name: str, target: str, hard: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.LNKTYPE if hard else tarfile.SYMTYPE
    info.linkname = target
    return info


@pytest.mark.parametrize(
    ("members", "expected"),
    [
        ([tarfile.TarInfo("/etc/evil.py")], "absolute path"),
        ([tarfile.TarInfo("../evil.py")], "leaves the directory"),
        ([tarfile.TarInfo("a/../../evil.py")], "leaves the directory"),
        ([_link("data", "/etc")], "links outside"),
        ([_link("data", "../../outside")], "links outside"),
        ([_link("hard", "../outside", hard=True)], "links outside"),
    ],
)
def test_crafted_archives_are_refused(cluster: Cluster, members: list, expected: str) -> None:
    uploads = cluster.data_dir / "uploads" / "experiments"
    before = sorted(uploads.iterdir()) if uploads.exists() else []
    n_before = experiment_count(cluster)
    config = {"entrypoint_script": "python3 train.py"}
    with cluster.http() as http:
        r = http.post("/api/v1/experiments",
                      json={"config": config, "model_definition": _tar(members)})
    assert r.status_code == 400, r.text
    assert expected in r.json()["detail"]
    after = sorted(uploads.iterdir()) if uploads.exists() else []
    assert after == before  # nothing written
    assert experiment_count(cluster) == n_before


def test_archive_over_the_size_limit(cluster: Cluster) -> None:
    from det_sdk.master.archive import MAX_ARCHIVE_BYTES

    blob = base64.b64encode(os.urandom(MAX_ARCHIVE_BYTES + 1)).decode()
    with cluster.http() as http:
        r = http.post("/api/v1/experiments",
                      json={"config": {"entrypoint_script": "x"}, "model_definition": blob})
    assert r.status_code == 400 and "over the limit" in r.json()["detail"]


def test_tokens(cluster: Cluster) -> None:
    with cluster.http(token=None) as anonymous:
        assert anonymous.get("/api/v1/experiments").status_code == 401
    with cluster.http(token="not-a-token") as wrong:
        assert wrong.get("/api/v1/experiments").status_code == 401
    # a task's token ends with its process (issue 11, S5); what a live one may do is
    # tested in test_security.py
    db = sqlite3.connect(cluster.data_dir / "master.db")
    token, trial_id = db.execute(
        "SELECT token, trial_id FROM allocations WHERE trial_id IS NOT NULL"
        " AND state = 'EXITED' LIMIT 1").fetchone()
    report = {"group": "training", "steps_completed": 1, "metrics": {"loss": 1.0}}
    with cluster.http(token=token) as task:
        assert task.post(f"/api/v1/trials/{trial_id}/metrics", json=report).status_code == 401
        assert task.get(f"/api/v1/trials/{trial_id}").status_code == 401


def test_master_killed_while_a_trial_runs(cluster: Cluster) -> None:
    config = cluster.write_config("restart", searcher={
        "name": "single", "metric": "val_loss", "max_length": {"epochs": 6}},
        data={"sleep_per_epoch": 1.0})
    exp_id = create(cluster, config)
    wait_until("a checkpoint and an epoch", lambda: checkpoints(cluster) and describe(
        cluster, exp_id)["trials"][0]["epoch"] >= 1, timeout=120, every=0.5)
    master_pid = int((cluster.data_dir / "master.pid").read_text())
    os.kill(master_pid, 9)  # no goodbye
    time.sleep(4)  # the trial keeps training and keeps its reports for later
    cluster.up()
    out = cluster.det("experiment", "wait", str(exp_id))
    assert out.returncode == 0, cluster.det("experiment", "logs", str(exp_id)).stdout[-3000:]
    (trial,) = describe(cluster, exp_id)["trials"]
    assert trial["restarts"] == 0  # it never stopped
    with cluster.http() as http:
        rows = http.get(f"/api/v1/trials/{trial['id']}/metrics").json()
        ckpts = http.get("/api/v1/checkpoints",
                         params={"trial_id": trial["id"]}).json()["checkpoints"]
    keys = [(r["group"], r["steps_completed"]) for r in rows]
    assert len(keys) == len(set(keys)) == 12  # 6 epochs x (training, validation)
    assert sorted(c["epoch"] for c in ckpts) == [1, 2, 3, 4, 5, 6]


def test_kill_cancels_and_stops_the_processes(cluster: Cluster) -> None:
    config = cluster.write_config("kill", searcher={
        "name": "single", "metric": "val_loss", "max_length": {"epochs": 50}},
        data={"sleep_per_epoch": 1.0})
    exp_id = create(cluster, config)
    wait_until("the trial to run", lambda: describe(
        cluster, exp_id)["trials"][0]["state"] == "RUNNING", timeout=120, every=0.3)
    db = sqlite3.connect(cluster.data_dir / "master.db")
    (pid,) = db.execute("SELECT pid FROM allocations WHERE trial_id = ? AND state = 'RUNNING'",
                        (describe(cluster, exp_id)["trials"][0]["id"],)).fetchone()
    assert cluster.det("experiment", "kill", str(exp_id)).returncode == 0
    out = cluster.det("experiment", "wait", str(exp_id), timeout=60)
    assert out.returncode == 1  # not COMPLETED
    exp = describe(cluster, exp_id)
    assert exp["state"] == "CANCELED" and exp["trials"][0]["state"] == "CANCELED"
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)  # the whole process group is gone


def test_checkpoint_download_and_openapi(cluster: Cluster) -> None:
    ckpts = json.loads(cluster.det("checkpoint", "list", "--json").stdout)
    dest = cluster.root / "downloaded"
    out = cluster.det("checkpoint", "download", ckpts[0]["uuid"], "-o", str(dest))
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in dest.iterdir()) == [
        "checksums.json", "metadata.json", "model.json", "state.bin", "state.json"]
    assert (dest / "state.bin").read_bytes() == (Path(ckpts[0]["path"]) / "state.bin").read_bytes()
    bad = cluster.det("checkpoint", "download", "no-such-uuid", "-o", str(dest))
    assert bad.returncode == 1 and "no checkpoint" in bad.stderr
    assert httpx.get(f"{cluster.url}/openapi.json").status_code == 401  # the user's only
    spec = httpx.get(f"{cluster.url}/openapi.json",
                     headers={"Authorization": f"Bearer {cluster.token}"}).json()
    assert "/api/v1/trials/{trial_id}/metrics" in spec["paths"]


def test_unreachable_master_is_a_clear_error(cluster: Cluster) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    out = cluster.det("-m", nowhere, "experiment", "list")
    assert out.returncode == 1 and f"no token for {nowhere}" in out.stderr
    out = subprocess.run([str(DET), "-m", nowhere, "experiment", "list"], capture_output=True,
                         text=True, env={**cluster.env, "DET_USER_TOKEN": "t"})
    assert out.returncode == 1 and f"no master answers at {nowhere}" in out.stderr


FIVE_EPOCHS = {"searcher": {"name": "single", "metric": "val_loss", "max_length": {"epochs": 5}},
               "reproducibility": {"experiment_seed": 42}}


@pytest.fixture(scope="module")
def five_epochs(cluster: Cluster) -> int:
    """One 5-epoch trial (seed 42) that crashes once, after its second epoch, and is
    restarted from its checkpoint: run once for three tests. The crash test's restart;
    its checkpoints are the retention policy's (latest 2, best 1); its final weights
    (full.npz) the ones a paused and activated trial of the same config must end with (a
    trial resumed from its checkpoint, by a restart or by a pause, trains the bits of one
    run uninterrupted; retention deletes checkpoints, never changes what it trains)."""
    config = cluster.write_config(
        "retention", **FIVE_EPOCHS, data={"weights_out": str(cluster.root / "full.npz"),
                                          "fail_once_at_epoch": 1},
        checkpoint_storage={"save_trial_latest": 2, "save_trial_best": 1})
    exp_id = create(cluster, config)
    out = cluster.det("experiment", "wait", str(exp_id))
    assert out.returncode == 0, cluster.det("experiment", "logs", str(exp_id)).stdout[-3000:]
    return exp_id


def test_pause_mid_epoch_then_activate_continues_exactly(cluster: Cluster,
                                                         five_epochs: int) -> None:
    common = FIVE_EPOCHS  # the uninterrupted run's (five_epochs: full.npz)
    hold = cluster.root / "hold"
    hold.mkdir()
    paused = cluster.write_config("paused", **common, data={
        "weights_out": str(cluster.root / "paused.npz"), "hold_at": [1, 3, str(hold)]})
    exp_id = create(cluster, paused)
    deadline = time.time() + 120
    while not (hold / "reached").exists():  # the second epoch's fourth batch has ended
        assert time.time() < deadline
        time.sleep(0.2)
    assert cluster.det("experiment", "pause", str(exp_id)).returncode == 0
    trial_id = describe(cluster, exp_id)["trials"][0]["id"]
    # the log read in this process (a `det trial logs` per poll: ~0.3 s of CPU each)
    while "asks this trial to stop" not in trial_logs(cluster, trial_id):
        assert time.time() < deadline  # the trial has heard: it stops after this batch
        time.sleep(0.2)
    (hold / "release").write_text("x")
    while describe(cluster, exp_id)["trials"][0]["state"] != "PAUSED":
        assert time.time() < deadline
        time.sleep(0.2)
    (trial,) = describe(cluster, exp_id)["trials"]
    with cluster.http() as http:
        last = http.get(f"/api/v1/trials/{trial['id']}/checkpoints",
                        params={"latest": "true"}).json()[0]
    assert (last["epoch"], last["batch"]) == (1, 4)  # stopped mid-epoch, checkpointed there
    assert cluster.det("experiment", "activate", str(exp_id)).returncode == 0
    assert cluster.det("experiment", "wait", str(exp_id)).returncode == 0
    (trial,) = describe(cluster, exp_id)["trials"]
    assert trial["restarts"] == 0 and trial["steps_completed"] == 50
    a, b = np.load(cluster.root / "full.npz"), np.load(cluster.root / "paused.npz")
    assert list(a) == list(b) and list(a)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_retention_keeps_exactly_what_the_policy_says(cluster: Cluster,
                                                       five_epochs: int) -> None:
    (trial,) = describe(cluster, five_epochs)["trials"]
    with cluster.http() as http:
        metrics = http.get(f"/api/v1/trials/{trial['id']}/metrics",
                           params={"group": "validation"}).json()
    by_epoch = {m["epoch"]: m["metrics"]["val_loss"] for m in metrics}
    best_epoch = min(by_epoch, key=by_epoch.get)
    ckpts = json.loads(cluster.det("checkpoint", "list", "--trial", str(trial["id"]),
                                   "--json").stdout)
    assert sorted(c["epoch"] for c in ckpts) == sorted({4, 5, best_epoch})
    base = Path(ckpts[0]["path"]).parent
    # (the storage also holds the trials' TensorBoard files, in tensorboard/)
    on_disk = {p.name for p in base.iterdir()
               if not p.name.startswith(".") and p.name != "tensorboard"}
    kept = {c["uuid"] for c in ckpts}
    assert kept <= on_disk
    # the deleted ones are gone from disk too (other tests' checkpoints share the dir)
    with cluster.http() as http:
        all_known = {c["uuid"] for c in http.get("/api/v1/checkpoints",
                                                 params={"limit": 1000}).json()["checkpoints"]}
    assert on_disk == all_known
