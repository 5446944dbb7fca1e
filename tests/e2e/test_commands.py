"""Determined's commands (issue 58): ``det cmd run/list/describe/config/logs/kill`` against
a real master and the real ``det`` CLI, with Determined's ``startup-hook.sh`` for commands
and trials, and the hostile cases: 100 MB of output followed in bounded memory, 20
commands started at once queued on 2 slots, a killed command's processes gone, the
master's stop and its crash never leaving a command holding a slot.

One master (2 slots) for the module; the tests that stop and restart it come last.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.master import DET, Cluster, describe, running_cluster, wait_until
from tests.e2e.test_slurm import slurm_conf, slurm_master  # noqa: F401  (a fixture)
from tests.support import pid_gone

pytestmark = pytest.mark.timeout(600)
# the master's and the CLI's: the same on either Keras stack (but the Keras fit's test)
neutral = pytest.mark.stack_neutral


def _newest(cluster: Cluster) -> dict[str, Any]:
    """The command made last (the highest id: `det cmd list` sorts by start time, as
    Determined's, and a command queued earlier can start after it)."""
    return max(cluster.det_json("cmd", "list"), key=lambda c: int(c["id"]))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("commands"), slots=2) as c:
        yield c


def _command(c: Cluster, cmd_id: int) -> dict:
    """The command as the master has it (over HTTP: polling with `det` would cost a
    process a look; `det cmd describe` is tested once, below)."""
    with c.http() as http:
        return http.get(f"/api/v1/commands/{cmd_id}").json()["command"]


def _ended(c: Cluster, cmd_id: int, timeout: float = 120) -> dict:
    return wait_until(f"command {cmd_id} to end",
                      lambda: (lambda cmd: cmd if cmd["state"] == "TERMINATED" else None)(
                          _command(c, cmd_id)), timeout=timeout, every=0.2)


def _detached(c: Cluster, *words: str) -> int:
    out = c.det("cmd", "run", "-d", *words)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


def _pids(path: Path, n: int) -> list[int]:
    """The ``n`` pids a command wrote to ``path`` (once it has)."""
    text = wait_until(f"{n} pids in {path}", lambda: path.exists() and
                      len(path.read_text().split()) >= n and path.read_text(), timeout=120)
    return [int(p) for p in text.split()[:n]]


# --- the verbs ------------------------------------------------------------------------------


@neutral
def test_run_follows_the_output_and_exits_with_the_commands_code(cluster: Cluster) -> None:
    out = cluster.det("cmd", "run", "--", "sh", "-c", "echo to-stdout; echo to-stderr >&2; "
                      "echo slots=$DET_SLOT_IDS; exit 7")
    assert out.returncode == 7, out.stderr
    assert "to-stdout\n" in out.stdout and "to-stderr\n" in out.stdout
    assert "slots=[0]" in out.stdout  # resources.slots defaults to 1
    assert "Launched command (id: " in out.stderr and "exited with code 7" in out.stderr
    cmd_id = int(out.stderr.split("(id: ")[1].split(",")[0])
    cmd = cluster.det_json("cmd", "describe", str(cmd_id))
    assert (cmd["state"], cmd["exit_code"]) == ("TERMINATED", 7)
    # `det command` is the same noun; a bare noun lists; -q the ids
    assert str(cmd_id) in cluster.det("command", "list", "-q").stdout.split()
    assert "TERMINATED" in cluster.det("cmd").stdout
    listed = {c["id"]: c for c in cluster.det_json("cmd", "list")}
    assert listed[cmd_id]["exit_code"] == 7
    assert cluster.det("cmd", "logs", str(cmd_id)).stdout.startswith("to-stdout\n")
    # one word is a shell command line (Determined's `sh -c`), a config file's fields apply
    cfg = cluster.root / "cmd.yaml"
    cfg.write_text(yaml.safe_dump({"description": "mine", "environment": {
        "environment_variables": ["GREETING=hello there"]}, "resources": {"slots": 0}}))
    out = cluster.det("cmd", "run", "--config-file", str(cfg), "--config",
                      "hyperparameters.lr=0.5", "echo \"$GREETING\" | tr a-z A-Z; "
                      "echo slots=$DET_SLOT_IDS")
    assert out.returncode == 0, out.stderr
    assert "HELLO THERE\n" in out.stdout and "slots=[]" in out.stdout
    newest = _newest(cluster)
    assert (newest["description"], newest["slots"]) == ("mine", 0)
    config = yaml.safe_load(cluster.det("cmd", "config", str(newest["id"])).stdout)
    assert config["hyperparameters"] == {"lr": 0.5} and config["resources"]["slots"] == 0


@neutral
def test_bad_input_is_refused_with_the_field(cluster: Cluster) -> None:
    before = len(cluster.det_json("cmd", "list"))
    for words, expected in [
        (["cmd", "run"], "give the command to run"),
        (["cmd", "run", "--config", "resources.slots=3", "true"], "resources.slots: 3 is more"),
        (["cmd", "run", "--config", "resources.slots=-1", "true"], "resources.slots"),
        (["cmd", "run", "--config", "bind_mounts=[]", "true"], "bind_mounts"),
        (["cmd", "run", "-c", str(cluster.root / "missing"), "true"], "missing"),
        (["cmd", "logs", "999999"], "no command 999999"),
        (["cmd", "kill", "999999"], "no command 999999"),
    ]:
        out = cluster.det(*words)
        assert out.returncode != 0 and expected in out.stderr, (words, out.stderr)
    assert len(cluster.det_json("cmd", "list")) == before  # nothing half-made
    with cluster.http(token=None) as anon:
        assert anon.get("/api/v1/commands").status_code == 401


_PROBE = """
import os, sys, httpx
h = {"Authorization": "Bearer " + os.environ["DET_SESSION_TOKEN"]}
m = os.environ["DET_MASTER"]
mine = int(os.environ["DET_ALLOCATION_ID"].split("-")[1])
body = {"group": "training", "steps_completed": 1, "metrics": {"loss": 1.0}}
print("STATUS", httpx.get(m + "/api/v1/commands", headers=h).status_code,
      httpx.post(f"{m}/api/v1/commands/{mine}/metrics", json=body, headers=h).status_code,
      httpx.post(f"{m}/api/v1/commands/{sys.argv[1]}/metrics", json=body,
                 headers=h).status_code)
"""


@neutral
def test_a_commands_token_reports_for_itself_only(cluster: Cluster) -> None:
    """A command's task token lists no command and reports metrics for its own command
    only (403 for another's)."""
    other = _detached(cluster, "true")
    probe = cluster.root / "probe.py"
    probe.write_text(_PROBE)
    out = cluster.det("cmd", "run", "--config", "resources.slots=0", "python3", str(probe),
                      str(other))
    assert out.returncode == 0, out.stderr
    assert "STATUS 403 204 403" in out.stdout, out.stdout


@neutral
def test_logs_head_tail_and_follow(cluster: Cluster) -> None:
    cmd_id = _detached(cluster, "sh", "-c", "for i in 1 2 3 4 5; do echo line$i; done")
    _ended(cluster, cmd_id)
    assert cluster.det("cmd", "logs", str(cmd_id), "--head", "2").stdout == "line1\nline2\n"
    assert cluster.det("cmd", "logs", str(cmd_id), "--tail", "2").stdout == "line4\nline5\n"
    assert cluster.det("task", "logs", f"command-{cmd_id}", "--tail", "1").stdout == "line5\n"
    gate = cluster.root / "gate"
    cmd_id = _detached(cluster, "sh", "-c", f"echo first; while [ ! -e {gate} ]; do sleep 0.1;"
                       " done; echo second")
    follower = subprocess.Popen([str(DET), "cmd", "logs", str(cmd_id), "-f", "--tail", "5"],
                                env=cluster.env, stdout=subprocess.PIPE, text=True)
    try:
        assert follower.stdout is not None
        assert follower.stdout.readline() == "first\n"  # before the command has ended
        gate.touch()
        assert follower.stdout.readline() == "second\n"
        assert follower.wait(timeout=120) == 0
    finally:
        follower.kill()


@neutral
def test_queue_job_list_and_kill(cluster: Cluster) -> None:
    """A command holding both slots keeps the next one QUEUED (in `det job list` as
    Determined's queue); killed, its processes are gone and the queued one runs."""
    pids = cluster.root / "kill.pids"
    big = _detached(cluster, "--config", "resources.slots=2", "--", "sh", "-c",
                    f"sleep 300 & echo $! >> {pids}; sh -c 'echo $$ >> {pids}; sleep 300' & "
                    "wait")
    queued = _detached(cluster, "echo", "after")
    running = _pids(pids, 2)
    queue = {(j["type"], j["id"]): j for j in cluster.det_json("job", "list")}
    assert queue[("COMMAND", big)]["state"] == "SCHEDULED"
    assert queue[("COMMAND", big)]["acquired"] == 2
    assert queue[("COMMAND", queued)]["state"] == "QUEUED"
    assert _command(cluster, queued)["state"] == "QUEUED"
    tasks = cluster.det_json("task", "list")
    assert [t["task_id"] for t in tasks if t["type"] == "COMMAND"] == [f"command-{big}"]
    assert cluster.det("cmd", "kill", str(big)).stdout.strip() == f"Killed command {big}"
    ended = _ended(cluster, big)
    assert ended["exit_status"].startswith("killed")
    for pid in running:  # the whole process group, grandchildren too
        wait_until(f"process {pid} to be gone", lambda pid=pid: pid_gone(pid), timeout=30)
    after = _ended(cluster, queued)
    assert after["exit_code"] == 0
    assert cluster.det("cmd", "logs", str(queued)).stdout == "after\n"
    assert not [j for j in cluster.det_json("job", "list") if j["type"] == "COMMAND"]
    # killing an ended command changes nothing; a queued one ends at once
    assert cluster.det("cmd", "kill", str(big)).returncode == 0
    hold = _detached(cluster, "--config", "resources.slots=2", "sleep", "300")
    waiting = _detached(cluster, "true")
    assert _command(cluster, waiting)["state"] == "QUEUED"
    assert cluster.det("cmd", "kill", str(waiting), str(hold)).returncode == 0
    assert _command(cluster, waiting)["exit_status"] == "killed before it started"
    _ended(cluster, hold)


@neutral
def test_a_killed_det_cmd_run_leaves_the_command_running(cluster: Cluster) -> None:
    """Ctrl-C stops the following, not the command (as Determined)."""
    proc = subprocess.Popen([str(DET), "cmd", "run", "sh", "-c", "echo up; sleep 300"],
                            env=cluster.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline() == "up\n"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "goes on" in err, err
    cmd_id = int(err.split("(id: ")[1].split(",")[0])
    assert _command(cluster, cmd_id)["state"] == "RUNNING"
    cluster.det("cmd", "kill", str(cmd_id))
    _ended(cluster, cmd_id)


# --- startup-hook.sh ------------------------------------------------------------------------


@neutral
def test_startup_hook_runs_before_a_command(cluster: Cluster) -> None:
    ctx = cluster.root / "hooked"
    ctx.mkdir()
    (ctx / "startup-hook.sh").write_text("echo hook ran in $(basename $PWD)\n"
                                         "export FROM_HOOK=exported\n")
    (ctx / "data.txt").write_text("context file\n")
    out = cluster.det("cmd", "run", "-c", str(ctx), "--", "sh", "-c",
                      "echo value=$FROM_HOOK; cat data.txt")
    assert out.returncode == 0, out.stderr
    assert "hook ran in workdir" in out.stdout
    # traced as Determined's entrypoints trace it (set -x), before the command's output
    assert out.stdout.index("export FROM_HOOK") < out.stdout.index("value=exported")
    assert "context file\n" in out.stdout


@neutral
def test_a_failing_startup_hook_ends_the_command(cluster: Cluster) -> None:
    ctx = cluster.root / "bad-hook"
    ctx.mkdir()
    (ctx / "startup-hook.sh").write_text("echo preparing\nfalse\necho never-here\n")
    out = cluster.det("cmd", "run", "-c", str(ctx), "--", "echo", "the-command-ran")
    assert out.returncode == 1
    assert "preparing" in out.stdout and "never-here\n" not in out.stdout
    assert "the-command-ran" not in out.stdout
    assert "det_sdk: startup-hook.sh failed (exit status 1)" in out.stdout


@neutral
def test_a_failing_startup_hook_ends_a_trial(cluster: Cluster) -> None:
    model = cluster.root / "hook-model"
    model.mkdir()
    (model / "startup-hook.sh").write_text("echo trial-hook-output\nexit 5\n")
    config = cluster.write_config("hooked-trial", max_restarts=0)
    out = cluster.det("e", "create", str(config), str(model))
    assert out.returncode == 0, out.stderr
    exp_id = int(out.stdout.split()[-1])
    # polled in this process (a `det e describe` per poll: ~0.3 s of CPU)
    exp = wait_until("the experiment to end", lambda: (lambda e: e if e["state"] in (
        "COMPLETED", "ERROR", "CANCELED") else None)(describe(cluster, exp_id)),
        timeout=120, every=0.3)
    assert exp["state"] == "ERROR"
    log = cluster.det("e", "logs", str(exp_id)).stdout
    assert "trial-hook-output" in log and "startup-hook.sh failed (exit status 5)" in log


# --- hostile input --------------------------------------------------------------------------

_MIB = 1 << 20


def _peak_kib(argv: list[str], env: dict[str, str], stdout: Path) -> tuple[int, int]:
    """Run ``argv`` with stdout to a file: its exit code and its peak RSS in KiB (its
    own, read by a parent of nothing else)."""
    probe = ("import resource, subprocess, sys\n"
             "with open(sys.argv[1], 'wb') as out:\n"
             "    rc = subprocess.call(sys.argv[2:], stdout=out)\n"
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
             "sys.exit(rc)\n")
    done = subprocess.run([sys.executable, "-c", probe, str(stdout), *argv], env=env,
                          capture_output=True, text=True, timeout=400)
    return done.returncode, int(done.stdout.split()[-1])


def _master_peak_kib(c: Cluster) -> int:
    pid = int((c.data_dir / "master.pid").read_text().split()[0])
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines()
                    if line.startswith("VmHWM:")))


@neutral
def test_100_mb_of_output_is_followed_in_bounded_memory(cluster: Cluster) -> None:
    master_before = _master_peak_kib(cluster)
    # lines of 1,000 bytes, two-byte characters at odd offsets: the master's 1 MiB pieces
    # end inside lines, and would end inside characters but that it cuts before them
    line = ("x" + "\u00e9" * 499 + "\n").encode()
    lines = 104_858  # 100 MB
    writer = (f"import sys\nline = {line!r}\nfor _ in range({lines}): "
              "sys.stdout.buffer.write(line)\n")
    script = cluster.root / "flood.py"
    script.write_text(writer)
    followed = cluster.root / "flood.out"
    code, cli_kib = _peak_kib([str(DET), "cmd", "run", "python3", str(script)], cluster.env,
                              followed)
    assert code == 0
    assert followed.stat().st_size == lines * len(line)  # every byte, in order
    with open(followed, "rb") as f:
        f.seek(50_000 * len(line))
        assert f.read(len(line)) == line
        f.seek(0)
        while block := f.read(8 * _MIB):
            assert "\ufffd".encode() not in block  # no character cut in two
    # a follower of 100 MB holds a few pieces of 1 MiB, never the log (det's own baseline
    # is about 60 MB of Python, httpx and yaml)
    assert cli_kib < 150 * 1024, f"det cmd run peaked at {cli_kib} KiB"
    cmd_id = _newest(cluster)["id"]
    code, tail_kib = _peak_kib([str(DET), "cmd", "logs", str(cmd_id), "--tail", "2"],
                               cluster.env, cluster.root / "tail.out")
    assert code == 0 and (cluster.root / "tail.out").read_bytes() == 2 * line
    assert tail_kib < 150 * 1024, f"det cmd logs --tail peaked at {tail_kib} KiB"
    # the master answers 1 MiB a call: its peak grew by far less than the log
    assert _master_peak_kib(cluster) - master_before < 60 * 1024


@neutral
def test_20_commands_at_once_are_queued_on_the_slots(cluster: Cluster) -> None:
    """20 launches at the same moment (20 threads, as 20 users' `det cmd run -d`): each is
    answered, and they run 2 at a time."""
    from concurrent.futures import ThreadPoolExecutor

    def launch(_: int) -> int:
        with cluster.http() as http:
            resp = http.post("/api/v1/commands", json={"config": {"entrypoint": ["sleep",
                                                                                "0.3"]}})
        assert resp.status_code == 201, resp.text
        return int(resp.json()["command"]["id"])

    with ThreadPoolExecutor(20) as pool:
        ids = list(pool.map(launch, range(20)))
    assert len(set(ids)) == 20
    # (whether one is still QUEUED now depends on the machine's speed: under load the
    # last answers can come after the first commands ended; the bound below is the check)
    ended = [_ended(cluster, i, timeout=300) for i in ids]
    assert all(c["exit_code"] == 0 for c in ended), ended
    # never more than the master's 2 slots at once: the queue, not 20 processes
    events = sorted([(c["started"], 1) for c in ended] + [(c["ended"], -1) for c in ended])
    running, most = 0, 0
    for _, step in events:
        running += step
        most = max(most, running)
    assert most <= 2, f"{most} commands ran at once on 2 slots"
    assert cluster.http().get("/api/v1/master").status_code == 200


# --- det.keras.init() in a command ------------------------------------------------------------

_FIT = """
import json, sys
import numpy as np
import det_sdk as det
from det_sdk.keras._compat import keras

info = det.get_cluster_info()
ctx = det.keras.init(hparams={"lr": 0.05, "units": 2})
hp = ctx.training.hparams
rng = np.random.default_rng(0)
x = rng.random((64, 3)).astype("float32")
y = x.sum(axis=1, keepdims=True)
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(hp["units"]),
                          keras.layers.Dense(1)])
model.compile(optimizer=ctx.wrap_optimizer(keras.optimizers.SGD(hp["lr"])), loss="mse")
xs, ys = ctx.wrap_data(x, y)
ctx.fit(model, x=xs, y=ys, batch_size=16, epochs=2, validation_data=(xs, ys))
assert ctx.core.checkpoint.select() == ctx.core.checkpoint.latest_checkpoint  # its own run
own = ctx.load_checkpoint_model(checkpoint_uuid=ctx.core.checkpoint.latest_checkpoint)
trial = ctx.load_checkpoint_model(trial_id=int(sys.argv[1]))
print("RESULT " + json.dumps({
    "task_type": info.task_type, "hparams": dict(hp), "run_dir": str(ctx.core.local_run_dir),
    "run_id": ctx.core.run_id, "trial_uuid": ctx.core.checkpoint.select(int(sys.argv[1])),
    "own_layers": len(own.layers), "trial_model": type(trial).__name__,
    "trial_params": int(trial.count_params())}))
"""


def test_keras_fit_in_a_command(cluster: Cluster) -> None:
    """`det.keras.init()` in a command: the command config's hyperparameters over the
    script's, a fit that checkpoints into a local run of the command's working directory
    and reports its metrics to the master (`det cmd describe`), any trial's checkpoint
    loaded from the master; the run kept with the command's files (`det cmd download`)."""
    from harness.master import MODEL_DIR, run_to_the_end

    config = cluster.write_config("for-a-command", searcher={
        "name": "single", "metric": "val_loss", "max_length": {"epochs": 1}})
    _, _, trial, logs = run_to_the_end(cluster, config, MODEL_DIR, "trial to load")
    assert trial["state"] == "COMPLETED", logs[-3000:]
    ctx = cluster.root / "keras-ctx"
    ctx.mkdir()
    (ctx / "fit.py").write_text(_FIT)
    out = cluster.det("cmd", "run", "-c", str(ctx), "--config", "hyperparameters.units=3",
                      "python3", "fit.py", str(trial["id"]))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    result = json.loads(out.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert result["task_type"] == "COMMAND"
    assert result["hparams"] == {"lr": 0.05, "units": 3}  # the command's over the script's
    assert result["run_dir"] == "det-runs/1" and result["own_layers"] == 2
    assert result["trial_params"] > 0 and result["run_id"] == 1
    # trial T is the master's trial T (run 1 is the command's own run: a different thing)
    trial_ckpts = cluster.http().get(f"/api/v1/trials/{trial['id']}/checkpoints",
                                     params={"latest": "true"}).json()
    assert result["trial_uuid"] == trial_ckpts[0]["uuid"]
    cmd_id = _newest(cluster)["id"]
    metrics = _command(cluster, cmd_id)["latest_metrics"]
    assert metrics["validation"]["epoch"] == 2 and "val_loss" in metrics["validation"]["metrics"]
    assert "validation (step 8): val_loss=" in cluster.det("cmd", "describe", str(cmd_id)).stdout
    # its local run is kept with its files: det runs list reads it as any local run
    files = cluster.root / "cmd-files"
    out = wait_until("the command's files", lambda: (lambda o: o if o.returncode == 0 else None)(
        cluster.det("cmd", "download", str(cmd_id), str(files))), timeout=60, every=0.5)
    runs = json.loads(cluster.det("runs", "list", "--runs-dir", str(files / "det-runs"),
                                  "--json").stdout)
    assert [(r["run_id"], r["epoch"]) for r in runs] == [(1, 2)] and runs[0]["checkpoints"] >= 1


@neutral
def test_a_command_on_slurm(slurm_conf: str, tmp_path: Path) -> None:  # noqa: F811
    """Under the Slurm resource manager a command of 1 slot is a Slurm job of one task,
    its startup hook sourced first; other slot counts are refused; a kill cancels it."""
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "startup-hook.sh").write_text("export HOOKED=on-slurm\n")
    (tmp_path / "m").mkdir()
    with slurm_master(tmp_path / "m", slurm_conf) as c:
        out = c.det("cmd", "run", "-c", str(ctx), "--", "sh", "-c", "echo value=$HOOKED; exit 4")
        assert out.returncode == 4, out.stdout + out.stderr
        assert "value=on-slurm" in out.stdout and "Slurm job" in out.stdout
        out = c.det("cmd", "run", "--config", "resources.slots=2", "true")
        assert out.returncode == 1 and "under Slurm a command takes 1 slot" in out.stderr
        cmd_id = _detached(c, "sleep", "300")
        wait_until("it to run on Slurm", lambda: "RUNNING" in c.squeue().values(), timeout=120)
        assert c.det("cmd", "kill", str(cmd_id)).returncode == 0
        assert _ended(c, cmd_id)["exit_status"].startswith("killed")
        wait_until("Slurm's job to end", lambda: "RUNNING" not in c.squeue().values(),
                   timeout=60)


# --- the master's stop and crash (last: they restart the module's master) --------------------


@neutral
def test_master_down_kills_running_commands(cluster: Cluster) -> None:
    pids = cluster.root / "down.pids"
    cmd_id = _detached(cluster, "sh", "-c", f"echo $$ >> {pids}; sleep 300")
    (pid,) = _pids(pids, 1)
    cluster.down()
    assert pid_gone(pid) or wait_until("the command's process to go", lambda: pid_gone(pid),
                                       timeout=30)
    cluster.up()
    cmd = _command(cluster, cmd_id)
    assert cmd["state"] == "TERMINATED" and cmd["exit_status"].startswith("killed"), cmd


@neutral
def test_after_a_crash_commands_are_terminated_and_free_their_slots(cluster: Cluster) -> None:
    pids = cluster.root / "crash.pids"
    held = _detached(cluster, "--config", "resources.slots=2", "--", "sh", "-c",
                     f"echo $$ >> {pids}; sleep 300")
    (pid,) = _pids(pids, 1)
    waiting = _detached(cluster, "echo", "never")
    master = int((cluster.data_dir / "master.pid").read_text().split()[0])
    os.kill(master, signal.SIGKILL)
    wait_until("the master to die", lambda: pid_gone(master), timeout=30)
    assert not pid_gone(pid)  # the crash left the command running, holding its slots
    (cluster.data_dir / "master.pid").unlink(missing_ok=True)
    cluster.up()
    for cmd_id in (held, waiting):
        cmd = _ended(cluster, cmd_id, timeout=60)
        assert cmd["exit_status"] == "the master restarted", cmd
    wait_until("the crashed command's process to go", lambda: pid_gone(pid), timeout=30)
    assert "the master restarted" in cluster.det("cmd", "logs", str(held)).stdout
    # both slots are free again: a command of 2 slots runs
    out = cluster.det("cmd", "run", "--config", "resources.slots=2", "echo", "free")
    assert out.returncode == 0 and out.stdout == "free\n", out.stderr
    assert json.loads(cluster.det("job", "list", "--json").stdout) == []
