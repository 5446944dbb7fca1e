"""Metrics, files and messages (issue 11: F1, F3, S7) on a real master.

F1: NaN and infinite metrics are stored and shown, and the report thread of a trial
never dies. F3: what the master deletes, and when. S7: the CLI's messages for YAML
that is not a config.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from det_sdk.client import MasterClient
from det_sdk.info import ClusterInfo
from det_sdk.session import MasterSession
from harness.master import wait_until
from tests.lifecycle_harness import TRIAL_DIR, Fakes

# Stack-neutral: this module tests the master, the CLI or the UI; Keras is at most the workload.
pytestmark = pytest.mark.stack_neutral


class _FailsOnce(MasterClient):
    """The real client, with one report that raises something no retry can fix (as the
    JSON encoding of a NaN did): the thread must log it and go on."""

    def report_metrics(self, trial_id: int, body: dict[str, Any]) -> None:
        if body["steps_completed"] == 2:
            raise RuntimeError("cannot encode this report")
        super().report_metrics(trial_id, body)


def test_nan_and_inf_metrics_are_stored_and_the_report_thread_never_dies(
        fakes: Fakes) -> None:
    """F1: the proposal's diverging learning rate: NaN and inf reach the master, a
    report that cannot be sent is dropped with a log line, the later ones arrive, and
    close() returns at once."""
    exp_id, trial_id, _proc = fakes.start_trial()
    alloc = fakes.running_allocation(trial_id)
    info = ClusterInfo(master_url=fakes.cluster.url, session_token=alloc["token"],
                       allocation_id=alloc["id"], task_type="TRIAL", experiment_id=exp_id,
                       trial_id=trial_id, config={})
    session = MasterSession(info, client=_FailsOnce(info.master_url, info.session_token))
    session.report_metrics("validation", 1, 1, {"loss": float("nan"),
                                                "acc": float("inf"), "not_a_number": "x"})
    session.report_metrics("training", 2, 1, {"loss": 0.5})
    session.report_metrics("training", 3, 1, {"loss": float("-inf")})
    session.report_progress(0.5)
    t0 = time.perf_counter()
    session.close(timeout=30)
    assert time.perf_counter() - t0 < 5
    with fakes.http() as http:
        rows = http.get(f"/api/v1/trials/{trial_id}/metrics").json()
    assert [(r["group"], r["steps_completed"], r["metrics"]) for r in rows] == [
        ("validation", 1, {"loss": "NaN", "acc": "Infinity"}),
        ("training", 3, {"loss": "-Infinity"}),
    ]
    trial = fakes.trial_of(exp_id)
    assert trial["best_metric"] is None  # a NaN is never the best
    assert trial["progress"] == 0.5
    out = fakes.cluster.det("trial", "describe", str(trial_id))
    assert out.returncode == 0 and "loss=NaN" in out.stdout and "acc=Infinity" in out.stdout
    fakes.send(trial_id, "finish")
    fakes.wait_state(exp_id, "COMPLETED", "COMPLETED")


def test_working_directories_uploads_and_unrecorded_checkpoints_are_cleaned_up(
        fakes: Fakes) -> None:
    """F3: when a trial ends its workdir goes (its log stays); the experiment's upload
    stays until the experiment is deleted (det e continue unpacks it again); a
    checkpoint directory nothing recorded goes once no trial writes to that storage;
    recorded checkpoints stay."""
    data = fakes.cluster.data_dir
    exp_id, trial_id, _proc = fakes.start_trial()
    workdir = data / "trials" / str(trial_id) / "workdir"
    assert (workdir / "trial.py").is_file()
    db = sqlite3.connect(f"file:{data / 'master.db'}?mode=ro", uri=True)
    (upload,) = db.execute("SELECT archive FROM experiments WHERE id = ?", (exp_id,)).fetchone()
    db.close()
    assert Path(upload).is_file()
    orphan = fakes.send(trial_id, "orphan_checkpoint")["uuid"]
    kept = fakes.send(trial_id, "checkpoint")["uuid"]
    ckpts = data / "checkpoints"
    assert (ckpts / orphan).is_dir() and (ckpts / kept).is_dir()
    fakes.send(trial_id, "finish")
    fakes.wait_state(exp_id, "COMPLETED", "COMPLETED")
    assert not workdir.exists()
    assert (data / "trials" / str(trial_id) / "logs.txt").is_file()
    assert Path(upload).is_file()  # an ended experiment can be continued
    wait_until("the unrecorded checkpoint to go", lambda: not (ckpts / orphan).exists(),
               timeout=10)
    assert (ckpts / kept).is_dir()
    assert fakes.cluster.det("e", "delete", str(exp_id), "--yes").returncode == 0
    assert not Path(upload).exists() and not (ckpts / kept).exists()


def test_a_restarted_master_sweeps_uploads_of_nothing(fakes: Fakes) -> None:
    """F3: an upload no experiment or job records (a crash between writing it and the
    record) is deleted at start-up."""
    folder = fakes.cluster.data_dir / "uploads" / "experiments"
    folder.mkdir(parents=True, exist_ok=True)
    stray = folder / "0123456789abcdef.tar.gz"
    stray.write_bytes(b"x" * 1000)
    fakes.cluster.down()
    fakes.cluster.up()
    assert not stray.exists()


YAML_CASES = {
    "scalar": ("other-config.yaml\n", "expected a mapping at the top level, got str"),
    "deep": ("a: " + "[" * 3000 + "]" * 3000 + "\n", "nested too deeply"),
    "bomb": ("a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n"
        for p, c in zip("abcdefgh", "bcdefghi")), "alias bomb"),
    "duplicate": ("name: a\nname: b\nentrypoint_script: python3 trial.py\n",
                  "duplicate key 'name' at line 2"),
    "nan_bound": ("entrypoint_script: python3 trial.py\nhyperparameters:\n  lr: {type: double, "
                  "minval: .nan, maxval: 1}\nsearcher: {name: random, max_trials: 1}\n",
                  "hyperparameters.lr.minval: Input should be a finite number"),
    "bool_epochs": ("entrypoint_script: python3 trial.py\nsearcher: {name: single, "
                    "max_length: {epochs: true}}\n",
                    "searcher.max_length.epochs: Input should be a valid integer"),
}


@pytest.mark.parametrize("case", sorted(YAML_CASES))
def test_the_cli_explains_yaml_that_is_not_a_config(fakes: Fakes, tmp_path: Path,
                                                    case: str) -> None:
    """S7: each is refused with a message that says what is wrong, fast, and nothing is
    created."""
    text, expected = YAML_CASES[case]
    path = tmp_path / f"{case}.yaml"
    path.write_text(text)
    (tmp_path / "other-config.yaml").write_text("entrypoint_script: python3 trial.py\n")
    with fakes.http() as http:
        before = http.get("/api/v1/experiments").json()["total"]
    t0 = time.perf_counter()
    out = fakes.cluster.det("experiment", "create", str(path), str(TRIAL_DIR))
    assert out.returncode == 1
    assert expected in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    assert time.perf_counter() - t0 < 10
    with fakes.http() as http:
        assert http.get("/api/v1/experiments").json()["total"] == before


def test_deeply_nested_json_bodies_get_400(fakes: Fakes) -> None:
    body = '{"config": ' + "[" * 100_000 + "]" * 100_000 + ', "model_definition": ""}'
    with fakes.http() as http:
        r = http.post("/api/v1/experiments", content=body,
                      headers={"content-type": "application/json"})
        assert r.status_code == 400, r.text
        assert http.get("/health").status_code == 200
