"""Nothing lost (issue 37), end to end: a damaged checkpoint falls back to an intact one,
a refused metrics report fails its trial, a job's files outlive it, the CLI packs with
bounded memory and prints what the master holds with control characters escaped.

A real master on 127.0.0.1 (one for the module), the real `det` CLI, TensorFlow-free
scripts (tests/nothing_lost).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.master import Cluster, create, describe, wait_until

# Stack-neutral: TensorFlow-free scripts on the master.
pytestmark = pytest.mark.stack_neutral

SCRIPTS = Path(__file__).resolve().parents[1] / "nothing_lost"


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("nothing_lost") / "model"
    shutil.copytree(SCRIPTS, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _finished(cluster: Cluster, exp: int) -> dict:
    wait_until("the experiment to end",
               lambda: describe(cluster, exp)["state"] in ("COMPLETED", "ERROR", "CANCELED"),
               timeout=240)
    return describe(cluster, exp)


def test_a_damaged_checkpoint_is_marked_and_the_trial_falls_back(
        cluster: Cluster, model: Path) -> None:
    exp = create(cluster, model / "damaged.yaml", model)
    info = _finished(cluster, exp)
    (trial,) = info["trials"]
    logs = cluster.det("trial", "logs", str(trial["id"])).stdout
    # crash, then one restore of the damaged one, then the intact one: not max_restarts
    assert trial["state"] == "COMPLETED" and trial["restarts"] == 2, logs[-3000:]
    assert "resumed from step 1" in logs
    assert logs.count("CheckpointCorruptError: ") == 1, logs[-3000:]
    with cluster.http() as http:
        ckpts = http.get(f"/api/v1/trials/{trial['id']}/checkpoints").json()
    damaged = [c for c in ckpts if c["damaged"]]
    (intact,) = [c for c in ckpts if not c["damaged"]]
    assert len(damaged) == 1 and damaged[0]["steps_completed"] == 2
    assert intact["steps_completed"] == 1 and trial["latest_checkpoint"] == intact["uuid"]
    note = f"checkpoint {damaged[0]['uuid']} failed verification on restore"
    assert note in logs and f"resumes from checkpoint {intact['uuid']}" in logs
    assert note in cluster.det("trial", "describe", str(trial["id"])).stdout
    assert note in cluster.det("experiment", "describe", str(exp)).stdout


@pytest.mark.parametrize("how", ["many", "refused"])
def test_metrics_the_master_cannot_store_fail_the_trial(
        cluster: Cluster, model: Path, how: str) -> None:
    """Over the limit: refused in the script before sending. Refused by the master (a
    step past 2**53): the trial fails with the master's reason, not a warning."""
    config = model / f"metrics-{how}.yaml"
    config.write_text((model / "metrics.yaml").read_text().replace(
        "metrics.py many", f"metrics.py {how}"))
    exp = create(cluster, config, model)
    (trial,) = _finished(cluster, exp)["trials"]
    assert trial["state"] == "ERROR", trial
    if how == "many":
        assert "MetricsLimitError: a training metrics report has 1001 metrics; the master " \
               "stores at most 1000" in trial["last_error"]
        assert "trained on" not in trial["last_error"]
    else:
        assert "ReportRefusedError: the master refused a metrics report as invalid " \
               "(HTTP 400)" in trial["last_error"], trial["last_error"]
        assert "steps_completed" in trial["last_error"]


def test_files_a_job_writes_outlive_it(cluster: Cluster, model: Path, tmp_path: Path) -> None:
    """predictions_path: predictions.npy (relative) is found after `det job run` ends."""
    out = cluster.det("job", "run", str(model / "job.yaml"), str(model), "--follow",
                      timeout=240)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    job_id = int(out.stdout.split("Created job ")[1].split()[0])
    got = cluster.det("job", "download", str(job_id), str(tmp_path / "out"))
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "out" / "predictions.txt").read_text() == "7 2 1\n"
    assert (tmp_path / "out" / "samples" / "epoch_1.txt").is_file()
    # only what the job wrote: not the uploaded directory's own files
    assert not (tmp_path / "out" / "job.py").exists()
    assert not (cluster.data_dir / "jobs" / str(job_id) / "workdir").exists()
    with cluster.http() as http:
        resp = http.get(f"/api/v1/jobs/{job_id}/files")
        assert resp.status_code == 200 and resp.headers["content-type"] == "application/gzip"
        assert http.get("/api/v1/trials/1/files").status_code == 404  # wrote nothing


def test_create_refuses_a_huge_directory_while_packing(cluster: Cluster, model: Path,
                                                       tmp_path: Path) -> None:
    """A 16 GiB model directory: refused in seconds, naming the limit, nothing uploaded."""
    big = tmp_path / "big"
    shutil.copytree(model, big)
    with open(big / "data.bin", "wb") as f:
        f.truncate(16 << 30)  # sparse
    out = cluster.det("experiment", "create", str(big / "damaged.yaml"), str(big), timeout=60)
    assert out.returncode != 0
    assert "over the master's limit of 536870912" in out.stderr, out.stderr
    assert "leave data sets out of the model directory" in out.stderr


def test_control_characters_from_the_master_are_printed_escaped(
        cluster: Cluster, model: Path) -> None:
    """A name with terminal escapes (set the title, clear the screen, ring) prints inert."""
    import yaml

    evil = "evil\x1b]0;pwned\x07\x1b[2J\x9b"
    config = model / "evil.yaml"
    config.write_text(yaml.safe_dump({
        "name": evil, "entrypoint": "python3 job.py", "max_restarts": 0,
        "searcher": {"name": "single", "metric": "x", "max_length": 1}}))
    exp = create(cluster, config, model)
    assert describe(cluster, exp)["name"] == evil  # stored as given; --json escapes it
    for args in (("experiment", "list"), ("experiment", "describe", str(exp))):
        out = cluster.det(*args)
        assert out.returncode == 0, out.stderr
        assert not any(c in out.stdout for c in "\x1b\x07\x9b"), repr(out.stdout)
        assert r"evil\x1b]0;pwned\x07\x1b[2J\x9b" in out.stdout
