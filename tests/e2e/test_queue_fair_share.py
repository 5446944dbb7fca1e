"""The fair-share policy (issue 59, item 5): `det master up --scheduler fair_share` divides
the slots between users by weighted max-min fairness (det_sdk.master.fair_share), and a
user below their share preempts the newest trial of a user above theirs, which resumes
once its user's share lets it. A real 2-slot master of its own, TensorFlow-free trials.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from harness.master import DET, Cluster, running_cluster, wait_until
from tests.lifecycle_harness import Fakes

pytestmark = pytest.mark.stack_neutral


@pytest.fixture(scope="module")
def c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("fair"),
                         options=["--slots", "2", "--scheduler", "fair_share"]) as cluster:
        yield cluster


class UserFakes(Fakes):
    """Fake trials created with ``token`` (another user's)."""

    def __init__(self, c: Cluster, token: str) -> None:
        super().__init__(c, c.root / "control")
        self.token = token

    def http(self) -> Any:
        return self.cluster.http(token=self.token)


def _login(c: Cluster, name: str, password: str) -> str:
    """Create user ``name`` and sign in as them at their own HOME; their token."""
    out = c.det("user", "create", name, "--password", password)
    assert out.returncode == 0, out.stderr
    home = c.root / f"home-{name}"
    home.mkdir()
    env = {**c.env, "HOME": str(home), "DET_PASS": password}
    out = subprocess.run([str(DET), "user", "login", name], env=env, capture_output=True,
                         text=True, timeout=120, cwd=c.root)
    assert out.returncode == 0, out.stderr
    return str(json.loads((home / ".det" / "credentials.json").read_text())[c.url])


def _preempted(fakes: Fakes, trial_id: int) -> bool:
    return bool(fakes.send(trial_id, "preempted")["preempt"])


def test_a_user_below_their_share_preempts_the_user_above_theirs(c: Cluster) -> None:
    admin = Fakes(c, c.root / "control")
    ann = UserFakes(c, _login(c, "ann", "ann-password-1"))
    # alone on the master, the admin's two experiments take both slots
    first, first_trial, _ = admin.start_trial(name="admin-1")
    second, second_trial, second_proc = admin.start_trial(name="admin-2")
    admin.send(second_trial, "report")
    admin.send(second_trial, "checkpoint")
    # ann arrives: her share is one slot; the admin's newest trial gives it back
    mine = ann.create(name="ann-1")
    mine_trial = ann.trial_of(mine)["id"]
    wait_until("the admin's newest trial to be asked to stop",
               lambda: _preempted(admin, second_trial), timeout=120, every=0.2)
    assert not _preempted(admin, first_trial)
    admin.send(second_trial, "exit0")
    ann.wait_started(mine_trial, timeout=120)
    exp = admin.experiment(second)
    assert (exp["state"], exp["trials"][0]["state"]) == ("ACTIVE", "QUEUED")
    # weight is Determined's `det e set weight`: stored in the experiment's resources
    out = c.det("e", "set", "weight", str(second), "2.5")
    assert out.returncode == 0, out.stderr
    assert admin.experiment(second)["config"]["resources"]["weight"] == 2.5
    # ann's trial ends: the admin's preempted one resumes from its checkpoint
    ann.send(mine_trial, "finish")
    ann.wait_state(mine, "COMPLETED", "COMPLETED")
    again = admin.wait_started(second_trial, after=second_proc["allocation"], timeout=120)
    assert again["resumed_from"] == 1
    for exp_id in (first, second):
        admin.command(exp_id, "kill")
    for exp_id in (first, second):
        admin.wait_state(exp_id, "CANCELED", "CANCELED", timeout=120)
