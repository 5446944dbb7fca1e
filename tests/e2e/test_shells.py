"""Determined's shells (issue 58): ``det shell start/open/show_ssh_command/list/config/
logs/kill`` against a real master, the real ``det`` CLI, a real OpenSSH ``sshd`` started
by the task and the real ``ssh`` client; a killed shell's port refused and its sessions
ended; another user refused its key; the master's stop and crash ending shells.

One master (2 slots) for the module; the test that stops and restarts it comes last.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.master import DET, Cluster, running_cluster, wait_until
from tests.support import pid_gone

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.stack_neutral,  # the master's, the CLI's and OpenSSH's: no Keras here
    pytest.mark.skipif(shutil.which("ssh") is None or not any(
        Path(p).exists() for p in ("/usr/sbin/sshd", "/usr/local/sbin/sshd")),
        reason="OpenSSH (ssh and sshd: scripts/setup.sh installs openssh-server)"),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("shells"), slots=2) as c:
        yield c


def _shell(c: Cluster, shell_id: int, token: str | None = "user") -> dict:
    with c.http(token) as http:
        return http.get(f"/api/v1/shells/{shell_id}").json()["shell"]


def _ready(c: Cluster, shell_id: int) -> dict:
    return wait_until(f"shell {shell_id}'s sshd", lambda: (lambda s: s if s["ready"] else None)(
        _shell(c, shell_id)), timeout=90, every=0.2)


def _ended(c: Cluster, shell_id: int) -> dict:
    return wait_until(f"shell {shell_id} to end", lambda: (
        lambda s: s if s["state"] == "TERMINATED" else None)(_shell(c, shell_id)),
        timeout=60, every=0.2)


def _started(c: Cluster, *words: str) -> int:
    out = c.det("shell", "start", "-d", *words)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


def _refused(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", port)) != 0


def _interactive(c: Cluster, shell_id: int, typed: bytes) -> str:
    """What `det shell open ID` on a terminal (a pty) shows for ``typed``, until it ends."""
    import pty
    import select

    main, sub = pty.openpty()
    proc = subprocess.Popen([str(DET), "shell", "open", str(shell_id)], env=c.env,
                            cwd=c.root, stdin=sub, stdout=sub, stderr=sub)
    os.close(sub)
    os.write(main, typed)
    out = b""
    try:
        while True:
            ready, _, _ = select.select([main], [], [], 60)
            assert ready, f"no output from the session in 60 s: {out!r}"
            try:
                chunk = os.read(main, 4096)
            except OSError:  # the session ended (EIO)
                break
            if not chunk:
                break
            out += chunk
        assert proc.wait(timeout=30) == 0, out
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(main)
    return out.decode(errors="replace").replace("\r\n", "\n")


def test_start_and_open_run_in_the_tasks_directory_with_its_environment(
        cluster: Cluster, tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "data.txt").write_text("from-the-context\n")
    (ctx / "startup-hook.sh").write_text("export HOOKED=yes\n")
    # start without -d: waits for sshd, then runs the words after -- over ssh
    out = cluster.det("shell", "start", "-c", str(ctx), "--", "echo hello; pwd; cat data.txt")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Launched shell (id: " in out.stderr
    shell_id = int(out.stderr.split("(id: ")[1].split(",")[0])
    lines = out.stdout.splitlines()
    assert lines[0] == "hello" and lines[2] == "from-the-context", out.stdout
    workdir = Path(lines[1])
    assert workdir.parts[-3:-1] == ("commands", str(shell_id)), workdir  # the task's own

    # open: the task's DET_* environment (and its startup hook's) in the session;
    # det_sdk.info knows it is in a task
    probe = ("echo type=$DET_TASK_TYPE hook=$HOOKED alloc=$DET_ALLOCATION_ID; python3 -c "
             "'from det_sdk.info import get_cluster_info as g; i = g(); "
             "print(\"info\", i.task_type, i.allocation_id)'")
    out = cluster.det("shell", "open", str(shell_id), "--", probe)
    assert out.returncode == 0, out.stdout + out.stderr
    alloc = out.stdout.split("alloc=")[1].split()[0]
    assert alloc.startswith(f"command-{shell_id}-")
    assert f"type=COMMAND hook=yes alloc={alloc}\ninfo COMMAND {alloc}\n" == out.stdout
    # a shell's entrypoint is its sshd; Determined's idle_timeout is for notebooks
    for bad in ("entrypoint=ls", "idle_timeout=30m"):
        out = cluster.det("shell", "start", "-d", "--config", bad)
        assert out.returncode != 0 and bad.split("=")[0] in out.stderr, out.stderr
    # ssh's own exit code comes back
    assert cluster.det("shell", "open", str(shell_id), "--", "exit 5").returncode == 5

    # the key: 0600 in the det config dir; ssh checks the task's host key
    key = cluster.root / "home" / ".det" / "shells" / f"127.0.0.1_{cluster.port}" / \
        str(shell_id) / "key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    shell = _shell(cluster, shell_id)
    known = (key.parent / "known_hosts").read_text()
    assert known == f"det-shell-{shell_id} {shell['host_key']}\n"
    # show_ssh_command's command works on its own (an IDE's)
    out = cluster.det("shell", "show_ssh_command", str(shell_id))
    assert out.returncode == 0, out.stderr
    command = shlex.split(out.stdout)
    assert "StrictHostKeyChecking=yes" in command and command[0] == "ssh"
    ran = subprocess.run([*command, "echo", "from-the-ide"], capture_output=True, text=True,
                         timeout=60, env=cluster.env)
    assert ran.stdout == "from-the-ide\n", ran.stderr
    # a server with another host key is refused (no silent trust)
    (key.parent / "known_hosts").write_text(
        f"det-shell-{shell_id} ssh-ed25519 "
        "AAAAC3NzaC1lZDI1NTE5AAAAIE2o7hZVtFQ+Ta3PEn0yqGRNqE3EHm+xMrRYf8fbj2bN\n")
    ran = subprocess.run([*command, "echo", "no"], capture_output=True, text=True,
                         timeout=60, env=cluster.env)
    assert ran.returncode == 255 and "no" not in ran.stdout.split(), ran.stderr
    assert "HOST IDENTIFICATION HAS CHANGED" in ran.stderr or "verification failed" in ran.stderr

    # an interactive session on a terminal: a login shell in the task's directory
    assert f"{workdir}\nin-42" in _interactive(cluster, shell_id,
                                                b"cd /; cd -; echo in-$((6*7)); exit\n")

    # list, config, logs, det job list
    assert str(shell_id) in cluster.det("shell", "list", "-q").stdout.split()
    listed = cluster.det_json("shell", "list")
    assert [s["id"] for s in listed if s["id"] == shell_id] and \
        all(s["kind"] == "shell" for s in listed)
    assert shell_id not in [c["id"] for c in cluster.det_json("cmd", "list")]
    assert "slots: 1" in cluster.det("shell", "config", str(shell_id)).stdout
    jobs = cluster.det_json("job", "list")
    assert {"type": "SHELL", "id": shell_id} in [{"type": j["type"], "id": j["id"]}
                                                 for j in jobs], jobs
    assert "Accepted publickey" in cluster.det("shell", "logs", str(shell_id)).stdout
    assert cluster.det("shell", "kill", str(shell_id)).returncode == 0
    _ended(cluster, shell_id)


def test_a_killed_shells_port_is_closed_and_its_sessions_end(
        cluster: Cluster, tmp_path: Path) -> None:
    shell_id = _started(cluster)
    port = _ready(cluster, shell_id)["port"]
    assert not _refused(port)
    pid_file = tmp_path / "session.pid"
    session = subprocess.Popen(
        [str(DET), "shell", "open", str(shell_id), "--", f"echo $$ > {pid_file}; sleep 300"],
        env=cluster.env, cwd=cluster.root, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        pid = int(wait_until("the session's pid", lambda: pid_file.exists() and
                             pid_file.read_text().strip(), timeout=60))
        out = cluster.det("shell", "kill", str(shell_id))
        assert out.returncode == 0 and f"Killed shell {shell_id}" in out.stdout
        shell = _ended(cluster, shell_id)
        assert shell["exit_status"].startswith("killed"), shell
        assert _refused(port)
        wait_until("the session's process to go", lambda: pid_gone(pid), timeout=30)
        assert session.wait(timeout=30) != 0  # its ssh was cut off
    finally:
        if session.poll() is None:
            session.kill()
    # nothing to open now: a clear error, and the key is forgotten
    out = cluster.det("shell", "open", str(shell_id), "--", "true")
    assert out.returncode != 0 and "TERMINATED" in out.stderr, out.stderr
    with cluster.http() as http:
        assert http.get(f"/api/v1/shells/{shell_id}/key").status_code == 409
    # a command is not a shell
    out = cluster.det("cmd", "run", "-d", "sleep", "1")
    assert cluster.det("shell", "open", out.stdout.strip()).returncode != 0


def test_only_the_owner_or_an_admin_gets_the_key(cluster: Cluster) -> None:
    from tests.e2e.test_users import Person

    assert cluster.det("user", "create", "bob", "--password", "bob-password-1").returncode == 0
    bob = Person(cluster, "bob")
    out = bob.det("user", "login", "bob", password="bob-password-1")
    assert out.returncode == 0, out.stderr
    shell_id = _started(cluster)
    _ready(cluster, shell_id)
    bob_token = bob.token
    with cluster.http(bob_token) as http:
        r = http.get(f"/api/v1/shells/{shell_id}/key")
        assert r.status_code == 403 and "only its owner or an admin" in r.text, r.text
        assert "private_key" not in http.get(f"/api/v1/shells/{shell_id}").text
        assert http.post(f"/api/v1/shells/{shell_id}/kill").status_code == 403
    out = bob.det("shell", "open", str(shell_id), "--", "echo in")
    assert out.returncode != 0 and "in\n" not in out.stdout, out.stdout + out.stderr
    assert "only its owner or an admin" in out.stderr, out.stderr
    # the owner (the first admin) gets it; the task's token neither gets it nor reports
    # for another shell
    with cluster.http() as http:
        assert http.get(f"/api/v1/shells/{shell_id}/key").json()["private_key"].startswith(
            "-----BEGIN OPENSSH PRIVATE KEY-----")
    assert cluster.det("shell", "kill", str(shell_id)).returncode == 0
    _ended(cluster, shell_id)


def test_master_down_and_a_crash_end_shells_and_close_their_ports(cluster: Cluster) -> None:
    shell_id = _started(cluster)
    port = _ready(cluster, shell_id)["port"]
    cluster.down()
    wait_until("the shell's port to close", lambda: _refused(port), timeout=30)
    cluster.up()
    assert _shell(cluster, shell_id)["state"] == "TERMINATED"

    shell_id = _started(cluster, "--config", "resources.slots=2")
    port = _ready(cluster, shell_id)["port"]
    master = int((cluster.data_dir / "master.pid").read_text().split()[0])
    os.kill(master, signal.SIGKILL)
    wait_until("the master to die", lambda: pid_gone(master), timeout=30)
    assert not _refused(port)  # the crash left it running
    (cluster.data_dir / "master.pid").unlink(missing_ok=True)
    cluster.up()
    shell = _ended(cluster, shell_id)
    assert shell["exit_status"] == "the master restarted", shell
    wait_until("the crashed shell's port to close", lambda: _refused(port), timeout=30)
    # its 2 slots are free again
    out = cluster.det("cmd", "run", "--config", "resources.slots=2", "echo", "free")
    assert out.returncode == 0 and out.stdout == "free\n", out.stderr
    assert json.loads(cluster.det("job", "list", "--json").stdout) == []
