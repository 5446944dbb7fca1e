"""``det tensorboard start|list|kill|open|logs`` against a master in this process (issue 48):
bad input is refused naming the argument, with exit 1; the trials' directories are the
ones the trials write; a master that starts after one that died marks what that one ran
TERMINATED (no stale URL) and leaves alone a process that is not its TensorBoard; ids
are found by a unique beginning; a task's token is refused.

In-process over the real app (FastAPI's TestClient) and a real master's SQLite store, the
CLI's commands in this process against it. No TensorBoard is started here (that is a
process: tests/e2e/test_ui.py starts one, through the real ``det``).
"""

from __future__ import annotations

import json
import os
import time
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from det_sdk.cli import common
from det_sdk.cli import main as cli_main
from det_sdk.master.app import create_app
from det_sdk.master.core import Master
from det_sdk.master.errors import InvalidRequest
from det_sdk.master.tensorboards import MAX_LIVE, MAX_TRIALS, Source, tensorboard_dir
from harness.app_master import AppMaster

pytestmark = pytest.mark.stack_neutral


class Env(AppMaster):
    def experiment(self, trials: int = 2) -> int:  # type: ignore[override]
        return super().experiment(
            searcher={"name": "grid", "metric": "val_loss", "max_length": {"epochs": 1}},
            hyperparameters={"lr": {"type": "categorical", "vals": [0.1, 0.2][:trials]}})


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    e = Env(tmp_path)
    monkeypatch.setattr(common, "connect", lambda args: e.client())
    monkeypatch.setenv("DET_USER_TOKEN", e.token)
    with e:
        yield e


def _det(capsys: pytest.CaptureFixture[str], *words: str) -> tuple[int, str, str]:
    code = cli_main.main(list(words))
    out, err = capsys.readouterr()
    return code, out, err


def test_bad_input_is_refused_naming_it(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    exp = env.experiment()
    for words, says in [
        ((), "experiment_ids or --trial-ids"),
        (("77",), "no experiment 77"),
        (("-t", "99"), "no trial 99"),
        ((str(exp), "--config", "resources.slots=1"), "resources: det_sdk's master runs"),
        ((str(exp), "--config", "description=[1]"), "description: expected a string"),
    ]:
        code, _, err = _det(capsys, "tensorboard", "start", *words, "--no-browser")
        assert code == 1 and says in err and "Traceback" not in err, (words, err)
    assert env.http.get("/api/v1/tensorboards").json() == {"tensorboards": []}  # none started
    with pytest.raises(SystemExit) as parse_error:
        cli_main.main(["tensorboard", "start", str(exp), "-c", "dir"])
    assert parse_error.value.code == 2 and "refused by det_sdk" in capsys.readouterr().err
    # an experiment without trials (yet)
    empty = env.master.store.create_experiment_with_trials(
        env.master.store.experiment(exp)["config"], "", [])
    code, _, err = _det(capsys, "tensorboard", "start", str(empty), "--no-browser")
    assert code == 1 and f"experiment {empty} has no trials" in err, err
    # ids the master does not know, for every verb that takes one
    for verb in ("kill", "open", "logs"):
        code, _, err = _det(capsys, "tensorboard", verb, "0123abcd")
        assert code == 1 and "no TensorBoard '0123abcd'" in err, (verb, err)
    assert env.http.get("/api/v1/tensorboards/not!an-id").status_code == 400
    # over Determined's limit of trials per TensorBoard: refused before anything runs
    many = [Source(1, t, f"/x/{t}") for t in range(MAX_TRIALS + 1)]
    with pytest.raises(InvalidRequest, match="limit of 100"):
        env.master.tensorboards.start(many, [1], [])


def test_the_trials_directories_are_where_trials_write(env: Env) -> None:
    exp = env.experiment()
    trials = [t["id"] for t in env.master.store.trials(exp)]
    sources = env.master.tensorboard_sources([exp], [trials[0]])  # a trial once
    storage = (env.root / "storage").resolve()
    assert [(s.experiment_id, s.trial_id, s.path) for s in sources] == [
        (exp, t, str(tensorboard_dir(storage, exp, t))) for t in trials]


def _record(tb_id: str, pid: int, state: str = "RUNNING") -> dict[str, object]:
    return {"id": tb_id, "state": state, "description": "TensorBoard (experiment 1)",
            "experiment_ids": [1], "trial_ids": [], "trials": [1], "pid": pid, "port": 6006,
            "exit_status": None, "start_time": time.time(), "end_time": None}


def test_a_restarted_master_says_what_the_previous_one_ran_is_gone(
        env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    # what a master that died (no stop) left: two records RUNNING; one pid is this test's
    # process (alive, but not that TensorBoard: it must be left alone)
    ids = ["aa" + str(uuidlib.uuid4())[2:], "ab" + str(uuidlib.uuid4())[2:]]
    home = env.root / "m" / "tensorboards"
    home.mkdir(parents=True)
    (home / "records.json").write_text(json.dumps([_record(ids[0], os.getpid()),
                                                   _record(ids[1], 2**22 + 7)]))
    master = Master(env.root / "m", slots=1, url="http://127.0.0.1:1")
    master.tensorboards.recover()  # Master.start's first steps
    http = TestClient(create_app(master), headers={"Authorization": f"Bearer {env.token}"})
    listed = http.get("/api/v1/tensorboards").json()["tensorboards"]
    assert [(tb["id"], tb["state"], tb["url"]) for tb in listed] == [
        (ids[0], "TERMINATED", None), (ids[1], "TERMINATED", None)]
    assert all("master" in tb["exit_status"] for tb in listed)
    os.kill(os.getpid(), 0)  # still here
    # the CLI (against this master): the table says so; ids by a unique beginning
    env.http = http
    code, out, _ = _det(capsys, "tensorboard", "list")
    assert code == 0 and out.count("TERMINATED") == 2 and "http://" not in out
    code, out, _ = _det(capsys, "tensorboard", "ls", "-q")
    assert out.split() == ids
    code, out, _ = _det(capsys, "tensorboard", "kill", ids[1][:6])
    assert code == 0 and out.strip() == f"Killed tensorboard {ids[1]}"
    code, _, err = _det(capsys, "tensorboard", "kill", "a")
    assert code == 1 and "the beginning of 2" in err
    code, out, err = _det(capsys, "tensorboard", "kill", ids[0], "nope0000", "-f")
    assert code == 0 and "Killed tensorboard" in out and "Skipping" in out, out + err
    code, _, err = _det(capsys, "tensorboard", "open", ids[0][:4])
    assert code == 1 and "TERMINATED: it must be RUNNING" in err
    code, out, _ = _det(capsys, "tensorboard", "list", "--json")
    assert [tb["state"] for tb in json.loads(out)] == ["TERMINATED"] * 2
    # a bare `det tensorboard` lists, as Determined's
    code, out, _ = _det(capsys, "tensorboard")
    assert code == 0 and out.count("TERMINATED") == 2


def test_a_task_token_is_refused(env: Env) -> None:
    exp = env.experiment(trials=1)
    trial = env.master.store.trials(exp)[0]["id"]
    env.master.store.update_trial(trial, state="RUNNING")
    env.master.store.create_allocation({
        "id": "trial-x", "task_type": "TRIAL", "trial_id": trial, "job_id": None,
        "token": "task-token", "state": "RUNNING", "pid": None, "slots": 1, "workdir": None,
        "started": 0.0})
    task = {"Authorization": "Bearer task-token"}
    r = env.http.post("/api/v1/tensorboards", json={"experiment_ids": [exp]}, headers=task)
    assert r.status_code == 403, r.text
    assert env.http.get("/api/v1/tensorboards", headers=task).status_code == 403


def test_a_start_over_the_same_trials_answers_the_one_that_serves(env: Env) -> None:
    exp = env.experiment()
    trials = [t["id"] for t in env.master.store.trials(exp)]
    home = env.root / "m" / "tensorboards"
    home.mkdir(parents=True)
    serving = {**_record(str(uuidlib.uuid4()), 2**22 + 7), "trials": trials[::-1]}
    others = [{**_record(str(uuidlib.uuid4()), 2**22 + 7), "trials": [100 + i]}
              for i in range(MAX_LIVE - 1)]
    (home / "records.json").write_text(json.dumps([serving, *others]))
    master = Master(env.root / "m", slots=1, url="http://127.0.0.1:1")  # its own records
    http = TestClient(create_app(master), headers={"Authorization": f"Bearer {env.token}"})
    # the same trials, however asked for: that one, no other process
    for body in ({"experiment_ids": [exp]}, {"trial_ids": trials[::-1]},
                 {"experiment_ids": [exp], "trial_ids": [trials[0]]}):
        r = http.post("/api/v1/tensorboards", json=body)
        assert r.status_code == 201 and r.json()["tensorboard"]["id"] == serving["id"], r.text
    # other trials while MAX_LIVE run: refused, saying what to do
    r = http.post("/api/v1/tensorboards", json={"trial_ids": [trials[0]]})
    assert r.status_code == 409 and "det tensorboard kill" in r.json()["detail"], r.text
    assert len(http.get("/api/v1/tensorboards").json()["tensorboards"]) == MAX_LIVE
