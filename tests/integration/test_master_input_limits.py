"""Issue 46: what the model registry takes is bounded, and what it holds is recoverable and
printed inert: metadata over the depth or size limit is refused with 400 naming the
limit; a model an older master stored with such metadata lists fine and can be deleted
(``det model delete``); names are matched whole; a damaged or deleted checkpoint is not
registered; the CLI prints control characters escaped and says what is wrong with its
input without a traceback; the UI's action header is not stood in for by any
``Authorization`` header.

In-process over the real app (FastAPI's TestClient) and a real master's SQLite store; the
CLI's commands run in this process against it (its client's HTTP is the TestClient).
"""

from __future__ import annotations

import json
import shutil
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from det_sdk.cli import common
from det_sdk.cli import main as cli_main
from det_sdk.master.app import create_app
from det_sdk.master.models import MAX_METADATA_BYTES
from det_sdk.storage import OWNER_FILE
from harness.app_master import AppMaster

pytestmark = pytest.mark.stack_neutral


class Env(AppMaster):
    def checkpoint(self) -> str:
        """A trial's recorded checkpoint, its directory written by the trial's task."""
        exp = self.experiment()
        trial = self.master.store.trials(exp)[0]["id"]
        self.master.store.update_trial(trial, state="RUNNING")
        alloc = f"trial-{uuidlib.uuid4().hex[:8]}"
        self.master.store.create_allocation({
            "id": alloc, "task_type": "TRIAL", "trial_id": trial, "job_id": None,
            "token": alloc, "state": "RUNNING", "pid": None, "slots": 1, "workdir": None,
            "started": 0.0})
        uuid = str(uuidlib.uuid4())
        (self.root / "storage" / uuid).mkdir(parents=True)
        (self.root / "storage" / uuid / OWNER_FILE).write_text(
            json.dumps({"allocation_id": alloc, "trial_id": trial}))
        self.master.report_checkpoint({"trial_id": trial, "uuid": uuid, "steps_completed": 1,
                                       "epoch": 1, "metrics": {"val_loss": 1.0}})
        return uuid


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    e = Env(tmp_path)
    monkeypatch.setattr(common, "connect", lambda args: e.client())
    monkeypatch.setenv("DET_USER_TOKEN", e.token)
    with e:
        yield e


def _deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def test_metadata_over_the_limits_is_refused_naming_the_limit(env: Env) -> None:
    r = env.http.post("/api/v1/models", json={"name": "deep", "metadata": _deep(500)})
    assert r.status_code == 400 and "MAX_METADATA_DEPTH" in r.json()["detail"], r.text
    r = env.http.post("/api/v1/models", json={"name": "big",
                                               "metadata": {"k": "x" * MAX_METADATA_BYTES}})
    assert r.status_code == 400 and "MAX_METADATA_BYTES" in r.json()["detail"], r.text
    assert env.http.get("/api/v1/models").json() == {"models": []}  # nothing was stored
    ok = env.http.post("/api/v1/models", json={"name": "ok", "metadata": _deep(32)})
    assert ok.status_code == 200, ok.text


def test_a_model_stored_over_the_limits_lists_and_is_deleted(
        env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    assert env.http.post("/api/v1/models", json={"name": "old"}).status_code == 200
    with env.master.store.tx() as db:  # what an older master stored (and then 500'd on)
        db.execute("UPDATE models SET metadata = ? WHERE name = 'old'",
                   (json.dumps(_deep(500)),))
    listed = env.http.get("/api/v1/models")
    assert listed.status_code == 200, listed.text
    assert "det model delete" in listed.json()["models"][0]["metadata"]["det_sdk_note"]
    assert cli_main.main(["model", "list"]) == 0
    assert cli_main.main(["model", "delete", "old"]) == 0
    assert "Deleted model old" in capsys.readouterr().out
    assert env.http.get("/api/v1/models").json() == {"models": []}
    assert env.http.delete("/api/v1/models/old").status_code == 404


def test_a_name_is_matched_whole(env: Env) -> None:
    for name in ("mnist\n", "mnist\nx", " mnist", "a/b"):
        r = env.http.post("/api/v1/models", json={"name": name})
        assert r.status_code == 400 and "model name" in r.json()["detail"], (name, r.text)


def test_a_damaged_or_deleted_checkpoint_is_not_registered(env: Env) -> None:
    assert env.http.post("/api/v1/models", json={"name": "m"}).status_code == 200
    good, damaged, gone = env.checkpoint(), env.checkpoint(), env.checkpoint()
    env.master.store.mark_checkpoint_damaged(damaged, "weights.h5: digest mismatch")
    shutil.rmtree(env.root / "storage" / gone)
    r = env.http.post("/api/v1/models/m/versions", json={"checkpoint_uuid": damaged})
    assert r.status_code == 409 and "is damaged (weights.h5: digest mismatch)" in r.text
    r = env.http.post("/api/v1/models/m/versions", json={"checkpoint_uuid": gone})
    assert r.status_code == 409 and "files are gone" in r.text
    r = env.http.post("/api/v1/models/m/versions", json={"checkpoint_uuid": good})
    assert r.status_code == 200 and r.json()["version"] == 1


def test_the_cli_prints_control_characters_escaped_and_refuses_bad_input_plainly(
        env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    assert env.http.post("/api/v1/models", json={
        "name": "m", "description": "evil\x1b[2J\x07", "metadata": {"k": "\x1b]0;x\x07"}}
    ).status_code == 200
    assert cli_main.main(["model", "describe", "m"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "evil\\x1b[2J\\x07" in out
    assert cli_main.main(["model", "create", "n", "--metadata", "{not json"]) == 1
    err = capsys.readouterr().err
    assert "det: error: --metadata: not JSON" in err and "Traceback" not in err
    assert cli_main.main(["model", "create", "n", "--metadata", "[1]"]) == 1
    assert "expected a JSON object" in capsys.readouterr().err
    for name in ("../jobs", "..", "a/../../jobs"):  # a name is one path segment, never a route
        assert cli_main.main(["model", "describe", name]) == 1
        err = capsys.readouterr().err
        assert "det: error:" in err and "Traceback" not in err, err
    # a job whose chief reported an output path with control characters
    from det_sdk.config import parse_job_config
    from det_sdk.master.lifecycle import JobEvent

    cfg = parse_job_config({"entrypoint_script": "true"}).model_dump(mode="json")
    (env.root / "a.tar.gz").write_bytes(b"")
    job = env.master.store.create_job(cfg, str(env.root / "a.tar.gz"))
    env.master.lifecycle.job_event(job, JobEvent.SCHEDULED)
    env.master.store.create_allocation({
        "id": "g-1", "task_type": "GENERIC", "trial_id": None, "job_id": job,
        "token": "g-1", "state": "RUNNING", "pid": None, "slots": 1, "workdir": None,
        "started": 0.0})
    env.master.report_job_progress("g-1", 1, 2, "/data/\x1b[31mred\x07")
    assert cli_main.main(["job", "describe", str(job)]) == 0
    out = capsys.readouterr().out
    assert "/data/\\x1b[31mred\\x07" in out and "\x1b" not in out and "\x07" not in out


def test_the_ui_action_header_is_not_stood_in_for_by_another_authorization(
        env: Env) -> None:
    ui = TestClient(create_app(env.master))
    code = ui.post("/ui/api/signin-codes",
                   headers={"Authorization": f"Bearer {env.token}"}).json()
    assert ui.get(code["path"], follow_redirects=False).status_code == 303  # the cookie
    env.checkpoint()
    for header in ("Basic dXNlcjpwYXNz", "Bearer not-a-token", "anything"):
        r = ui.post("/ui/api/experiments/1/pause", headers={"Authorization": header})
        assert r.status_code in (401, 403), (header, r.status_code)
        assert env.master.store.experiment(1)["state"] == "ACTIVE"
    r = ui.post("/ui/api/experiments/1/pause", headers={"X-Det-UI": "1"})
    assert r.status_code == 200 and r.json()["state"] != "ACTIVE"
