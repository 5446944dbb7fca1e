"""Determined's `det` command lines, typed as its users type them, against a real master
(issue 48): their effects, not only their exit codes. One master for the module; the
trials are TensorFlow-free (tests/cli_compat_model). The parsing of every Determined form:
tests/unit/test_cli_determined.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.master import Cluster, describe, running_cluster, trial_logs, wait_until

pytestmark = pytest.mark.stack_neutral

MODEL = Path(__file__).resolve().parents[1] / "cli_compat_model"
CONFIG = MODEL / "exp.yaml"
ENDED = ("COMPLETED", "CANCELED", "ERROR")


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("cli-determined"), slots=3) as c:
        yield c


def ok(c: Cluster, *args: str, timeout: float = 120) -> str:
    out = c.det(*args, timeout=timeout)
    assert out.returncode == 0, f"det {' '.join(args)}: {out.stdout[-2000:]}{out.stderr}"
    return out.stdout


def create(c: Cluster, *extra: str) -> int:
    out = ok(c, "e", "create", str(CONFIG), str(MODEL), *extra)
    return int(out.split("Created experiment ")[1].split()[0])


def exp(c: Cluster, exp_id: int) -> dict:
    return json.loads(ok(c, "e", "describe", str(exp_id), "--json"))


def ended(c: Cluster, exp_id: int, timeout: float = 120) -> dict:
    """The experiment once it has ended, as `det e describe --json` prints it: polled in
    this process (a `det` per poll costs ~0.3 s of CPU), then described by the CLI once."""
    wait_until(f"experiment {exp_id} to end",
               lambda: describe(c, exp_id)["state"] in ENDED, timeout)
    return exp(c, exp_id)


def test_logs_downloads_and_listings(master: Cluster) -> None:
    c = master
    # -f (--follow-first-trial): the first trial's log to its end, then det exits
    out = ok(c, "e", "create", str(CONFIG), str(MODEL), "-f")
    a = int(out.split("Created experiment ")[1].split()[0])
    assert "line 1\n" in out and "line 40\n" in out and "done" in out
    info = ended(c, a)
    assert info["state"] == "COMPLETED", info
    (trial,) = info["trials"]
    # e logs: the first trial's log, as Determined (no per-trial headers); head and tail
    full = ok(c, "e", "logs", str(a))
    assert "==>" not in full and "line 1\nline 2\n" in full and "line 40\n" in full
    assert ok(c, "e", "logs", str(a), "--head", "2") == "line 1\nline 2\n"
    assert ok(c, "t", "logs", str(trial["id"]), "--tail", "1") == full.splitlines(True)[-1]
    assert ok(c, "t", "logs", str(trial["id"]), "-f") == full  # ended: all, then exit 0
    # --json: Determined's records, a line each (issue 60)
    records = [json.loads(line) for line in
               ok(c, "t", "logs", str(trial["id"]), "--json").splitlines()]
    assert len(records) == len(full.splitlines()) and records[0]["trialId"] == trial["id"]
    assert any(r["log"] == "line 40\n" and r["rankId"] == 0 for r in records)
    # --config K=V over the file; a second experiment
    b = create(c, "--config", "hyperparameters.lines=3", "--config", "name=renamed-by-flag")
    b_info = ended(c, b)
    assert b_info["name"] == "renamed-by-flag"
    assert ok(c, "e", "logs", str(b)).count("line ") == 3

    # downloads where Determined puts them
    ckpts = json.loads(ok(c, "e", "lc", str(a), "--json"))
    by_step = {ck["steps_completed"]: ck for ck in ckpts}
    assert set(by_step) == {1, 2}
    ok(c, "t", "download", str(trial["id"]), "--best", "-o", "best")
    assert json.loads((c.root / "best" / "state.json").read_text()) == {"step": 1}  # loss 0.5
    latest = by_step[2]["uuid"]
    assert ok(c, "t", "download", str(trial["id"]), "--latest", "-q").strip() == \
        str(Path("checkpoints", latest))
    assert json.loads((c.root / "checkpoints" / latest / "state.json").read_text()) == \
        {"step": 2}
    ok(c, "c", "download", by_step[1]["uuid"])  # Determined's default: checkpoints/UUID
    assert (c.root / "checkpoints" / by_step[1]["uuid"] / "state.json").is_file()
    ok(c, "checkpoint", "download", latest, "-o", "there")
    assert (c.root / "there" / "state.json").is_file()
    ok(c, "e", "download", str(a), "-o", "top")  # the best of the top trial
    assert [p.name for p in (c.root / "top").iterdir()] == [by_step[1]["uuid"]]
    ok(c, "t", "files", str(trial["id"]), "files")  # det_sdk's own: the working directory
    assert (c.root / "files" / "out.txt").read_text() == "written by the trial"

    # listings complete: --limit is a page size; comma lists; a bare noun lists
    listed = json.loads(ok(c, "e", "list", "--limit", "1", "--json"))
    assert [e["id"] for e in listed] == [a, b]
    assert [e["id"] for e in json.loads(ok(c, "e", "list", "--pages", "1", "--limit", "1",
                                           "--offset", "1", "--json"))] == [b]
    assert [e["id"] for e in json.loads(ok(c, "e", "describe", f"{a},{b}", "--json"))] == [a, b]
    bare = ok(c, "e")
    assert str(a) in bare and "renamed-by-flag" in bare
    assert len(json.loads(ok(c, "e", "lt", str(a), "--json"))) == 1

    # archive hides from e list, --all shows, unarchive brings back
    assert ok(c, "e", "archive", str(a)).strip() == f"Archived experiment {a}"
    assert [e["id"] for e in json.loads(ok(c, "e", "list", "--json"))] == [b]
    every = {e["id"]: e["archived"] for e in json.loads(ok(c, "e", "ls", "-a", "--json"))}
    assert every == {a: True, b: False}
    ok(c, "e", "unarchive", str(a))
    assert [e["id"] for e in json.loads(ok(c, "e", "list", "--json"))] == [a, b]

    # set name / description, labels
    ok(c, "e", "set", "name", str(a), "new-name")
    ok(c, "e", "set", "description", str(a), "a description")
    ok(c, "e", "label", "add", str(a), "red")
    ok(c, "e", "label", "add", str(a), "blue")
    ok(c, "e", "label", "remove", str(a), "red")
    described = exp(c, a)
    assert described["name"] == "new-name"
    assert described["config"]["description"] == "a description"
    assert described["config"]["labels"] == ["blue"]
    assert "labels:\n- blue" in ok(c, "e", "config", str(a))
    # an ended experiment waits for nothing: its priority is refused (issue 59's queue)
    refused = c.det("e", "set", "priority", str(a), "10")
    assert refused.returncode == 1 and "is COMPLETED" in refused.stderr

    # delete: asks unless --yes; removes the checkpoints' files and the records
    paths = [Path(json.loads(ok(c, "c", "describe", ck["uuid"], "--json"))["path"])
             for ck in ckpts]
    assert all(p.is_dir() for p in paths)
    asked = c.det("e", "delete", str(a))
    assert asked.returncode == 1 and "--yes" in asked.stderr
    ok(c, "e", "delete", str(a), "--yes")
    assert not any(p.exists() for p in paths)
    assert c.det("e", "describe", str(a)).returncode == 1
    assert [e["id"] for e in json.loads(ok(c, "e", "list", "--all", "--json"))] == [b]
    # c delete: one checkpoint's files and record
    (b_ckpt, *_) = json.loads(ok(c, "e", "lc", str(b), "--json"))
    b_path = Path(json.loads(ok(c, "c", "describe", b_ckpt["uuid"], "--json"))["path"])
    ok(c, "c", "delete", b_ckpt["uuid"], "--yes")
    assert not b_path.exists() and c.det("c", "describe", b_ckpt["uuid"]).returncode == 1


def test_paused_kill_cancel_and_the_master(master: Cluster) -> None:
    c = master
    paused = create(c, "--paused")
    assert exp(c, paused)["state"] == "PAUSED"
    assert {t["state"] for t in exp(c, paused)["trials"]} == {"PAUSED"}
    sleepy = ["--config", "hyperparameters.sleep=120"]
    killed, canceled = create(c, *sleepy), create(c, *sleepy)
    for e in (killed, canceled):
        # polled in this process; `det e logs` shows the same log once it is there
        wait_until("its trial to print", lambda e=e: (t := describe(c, e)["trials"]) and
                   "line 40" in trial_logs(c, t[0]["id"]))
        logs = ok(c, "e", "logs", str(e))
        assert "done" not in logs and "line 40" in logs
    queue = json.loads(ok(c, "job", "list", "--json"))  # Determined's: the scheduler's queue
    assert [(j["type"], j["id"], j["state"], j["acquired"], j["needed"]) for j in queue] == [
        ("EXPERIMENT", killed, "SCHEDULED", 1, 1), ("EXPERIMENT", canceled, "SCHEDULED", 1, 1)]
    assert paused not in [j["id"] for j in queue]  # paused: not waiting for slots
    tasks = json.loads(ok(c, "task", "list", "--json"))
    assert len(tasks) == 2 and all(t["task_id"].startswith("trial-") for t in tasks)
    assert "line 40" in ok(c, "task", "logs", tasks[0]["task_id"], "--tail", "50")
    running = c.det("e", "archive", str(killed))  # only an ended one, as in Determined
    assert running.returncode == 1 and "only an ended experiment" in running.stderr
    running = c.det("e", "delete", str(killed), "--yes")
    assert running.returncode == 1 and "has ended" in running.stderr
    trial_id = exp(c, killed)["trials"][0]["id"]
    ok(c, "t", "kill", str(trial_id))
    assert ended(c, killed)["state"] == "CANCELED"
    assert "done" not in ok(c, "t", "logs", str(trial_id))  # killed: never finished
    ok(c, "e", "cancel", str(canceled))
    assert ended(c, canceled)["state"] == "CANCELED"
    assert "asked to stop" in ok(c, "e", "logs", str(canceled))  # it stopped when asked
    ok(c, "e", "activate", str(paused))
    assert ended(c, paused)["state"] == "COMPLETED"
    # -t: one trial of one scheduling unit, followed to its end, then archived
    out = ok(c, "e", "create", str(CONFIG), str(MODEL), "-t")
    test_exp = int(out.split("Created test experiment ")[1].split()[0])
    assert "line 40" in out
    assert exp(c, test_exp)["config"]["searcher"]["max_length"]["batches"] == 100
    assert test_exp not in [e["id"] for e in json.loads(ok(c, "e", "list", "--json"))]
    assert {e["id"]: e["archived"] for e in json.loads(ok(c, "e", "list", "-a", "--json"))
            }[test_exp] is True

    # the master, the user, the version
    assert f"url: {c.url}" in ok(c, "master", "info")
    assert ok(c, "master", "logs", "--tail", "3").count("\n") == 3
    assert "Authenticated as determined." in ok(c, "user", "login", "determined")
    assert ok(c, "user", "whoami").strip() == "You are logged in as user 'determined'"
    assert "client:" in ok(c, "version") and "det_sdk" in ok(c, "-v")


def test_continue_trains_the_same_trial_further_from_its_checkpoint(master: Cluster) -> None:
    c = master
    # max_length 2: 2 steps; -f returns once the trial's log ends (few `det` polls after)
    out = ok(c, "e", "create", str(CONFIG), str(MODEL), "--config",
             "entrypoint=python3 resume.py", "-f")
    e = int(out.split("Created experiment ")[1].split()[0])
    assert "starts at step 0\ntrained step 1\ntrained step 2\n" in out
    first = ended(c, e)
    assert first["state"] == "COMPLETED", first
    (trial,) = first["trials"]
    # refused as Determined refuses, and where nothing would train (exit 1, the reason)
    same = c.det("e", "continue", str(e))
    assert same.returncode == 1 and "trained to 2 epochs" in same.stderr, same.stderr
    other = c.det("e", "continue", str(e), "--config", "searcher.name=grid")
    assert other.returncode == 1 and "single searcher" in other.stderr, other.stderr
    paused = create(c, "--paused")
    live = c.det("experiment", "continue", str(paused), "--config", "searcher.max_length=3")
    assert live.returncode == 1 and "is PAUSED: only an ended experiment" in live.stderr

    # -f follows the continued trial to its end; same experiment, same trial, longer;
    # --config over --config-file over the experiment's config
    (c.root / "longer.yaml").write_text("description: continued\nsearcher:\n  max_length: 3\n")
    out = ok(c, "e", "continue", str(e), "--config-file", "longer.yaml", "--config",
             "searcher.max_length=4", "-f")
    assert out.startswith(f"Continued experiment {e}\n")
    assert "starts at step 2\ntrained step 3\ntrained step 4\n" in out  # from its checkpoint
    again = ended(c, e)
    assert again["state"] == "COMPLETED" and [t["id"] for t in again["trials"]] == [trial["id"]]
    assert again["config"]["searcher"]["max_length"]["epochs"] == 4
    assert again["config"]["description"] == "continued"
    assert again["trials"][0]["restarts"] == 0
    steps = [ck["steps_completed"] for ck in json.loads(ok(c, "e", "lc", str(e), "--json"))]
    assert sorted(steps) == [1, 2, 3, 4]
    assert ok(c, "e", "logs", str(e)).count("trained step 1\n") == 1  # never trained again
