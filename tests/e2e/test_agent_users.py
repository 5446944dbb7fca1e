"""Tasks run as their owner (issue 59, item 4): `det user link-with-agent-user` on a master
running as root; the linked user's trial runs as that Linux account (a real account, made
with useradd for the test), its files created as it; an unlinked user's as the master's.

Root only (setuid needs it): skipped, with the reason, otherwise.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.master import DET, Cluster, running_cluster
from tests.lifecycle_harness import Fakes

pytestmark = [pytest.mark.stack_neutral,
              pytest.mark.skipif(os.geteuid() != 0, reason="tasks run as another account "
                                 "only under a master running as root")]


@pytest.fixture(scope="module")
def account() -> Iterator[pwd.struct_passwd]:
    name = f"dettask{secrets.token_hex(3)}"
    out = subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell",
                          "/usr/sbin/nologin", name], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(f"useradd failed: {out.stderr.strip()}")
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], capture_output=True)


@pytest.fixture(scope="module")
def c() -> Iterator[Cluster]:
    # under /tmp, not pytest's root-only directory: the account must reach its task's
    root = Path(tempfile.mkdtemp(prefix="det-agent-users-"))
    root.chmod(0o711)
    try:
        with running_cluster(root) as cluster:
            yield cluster
    finally:
        if not os.environ.get("DET_KEEP_AGENT_TEST"):
            subprocess.run(["rm", "-rf", str(root)], capture_output=True)


def _reachable(path: Path) -> bool:
    """Whether any account may run ``path``: every directory above it traversable by
    others, and the file executable by them."""
    return all(p.stat().st_mode & 0o001 for p in [path, *path.parents])


class UserFakes(Fakes):
    def __init__(self, c: Cluster, token: str) -> None:
        super().__init__(c, c.root / "control")
        self.token = token

    def http(self) -> Any:
        return self.cluster.http(token=self.token)


def _det_as(c: Cluster, name: str, *args: str, password: str) -> subprocess.CompletedProcess:
    home = c.root / f"home-{name}"
    home.mkdir(exist_ok=True)
    env = {**c.env, "HOME": str(home), "DET_PASS": password}
    return subprocess.run([str(DET), *args], env=env, capture_output=True, text=True,
                          timeout=120, cwd=c.root)


def test_a_linked_users_trial_runs_as_their_account(c: Cluster,
                                                    account: pwd.struct_passwd) -> None:
    assert c.det("user", "create", "ann", "--password", "ann-password-1").returncode == 0
    assert _det_as(c, "ann", "user", "login", "ann", password="ann-password-1").returncode == 0
    token = json.loads((c.root / "home-ann" / ".det" / "credentials.json").read_text())[c.url]
    link = ["user", "link-with-agent-user", "ann", "--agent-uid", str(account.pw_uid),
            "--agent-gid", str(account.pw_gid), "--agent-user", account.pw_name,
            "--agent-group", account.pw_name]
    # only an admin links; root (uid 0) is never a target
    refused = _det_as(c, "ann", *link, password="ann-password-1")
    assert (refused.returncode != 0 and "403" in refused.stderr + refused.stdout) or \
        "may not" in refused.stderr, refused.stderr
    bad = c.det(*link[:3], "--agent-uid", "0", "--agent-gid", "0", "--agent-user", "root",
                "--agent-group", "root")
    assert bad.returncode != 0 and "agent_uid" in bad.stderr, bad.stderr
    typo = c.det(*link[:3], "--agent-uid", str(account.pw_uid + 1), *link[5:])
    assert typo.returncode != 0 and "agent_user" in typo.stderr, typo.stderr
    out = c.det(*link)
    assert out.returncode == 0, out.stderr

    control = c.root / "control"
    control.mkdir(exist_ok=True)
    control.chmod(0o777)  # the fake trial's mailbox: written by both accounts
    ann = UserFakes(c, token)
    if not _reachable(Path(sys.executable).resolve()):
        # this machine's Python is where no other account may run it (e.g. under a 0700
        # /root): the task still starts as the account, and only the account is refused
        exp_id = ann.create(name="ann's")
        trial_id = ann.trial_of(exp_id)["id"]
        ann.wait_state(exp_id, "ERROR", "ERROR", timeout=120)
        task_dir = c.data_dir / "trials" / str(trial_id)
        assert task_dir.stat().st_uid == account.pw_uid  # chowned for the account
        assert "Permission denied" in (task_dir / "logs.txt").read_text()  # never root's
    else:
        exp_id, trial_id, proc = ann.start_trial(name="ann's")
        # the process and what it creates are the account's
        status = Path(f"/proc/{proc['pid']}/status").read_text()
        uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
        assert uid_line.split()[1:] == [str(account.pw_uid)] * 4
        assert (control / f"trial-{trial_id}.json").stat().st_uid == account.pw_uid
        uuid = ann.send(trial_id, "checkpoint")["uuid"]
        (ckpt,) = [p for p in (c.data_dir / "checkpoints").rglob(uuid) if p.is_dir()]
        st = ckpt.stat()
        assert (st.st_uid, st.st_gid) == (account.pw_uid, account.pw_gid)
        assert st.st_mode & 0o077 == 0  # the owner's (and the master's, root) only
        ann.send(trial_id, "finish")
        ann.wait_state(exp_id, "COMPLETED", "COMPLETED", timeout=120)

    # the first admin is not linked: its trial runs as the master's account
    admin = Fakes(c, control)
    exp2, trial2, _ = admin.start_trial(name="admin's")
    assert (control / f"trial-{trial2}.json").stat().st_uid == 0
    admin.command(exp2, "kill")
    admin.wait_state(exp2, "CANCELED", "CANCELED", timeout=120)
