"""A model-based test of the master's lifecycle (issue 11): hypothesis drives a real master
through random sequences of user commands, trial behaviours and master crashes, and
checks after every step that the master agrees with a small model of its own.

The master is real (``det master up`` on 127.0.0.1, SQLite, a launcher of processes);
its trials are real processes (``tests/lifecycle_trial``, no TensorFlow) that do what
a rule tells them: report, checkpoint, write a checkpoint they never report, exit 0
before or after their searcher work, exit non-zero, crash (SIGKILL), obey a pause.
Rules also create experiments (some whose launch fails), pause, activate and kill
them, and kill -9 and restart the master.

Invariants, after every step:
- each trial is in the state the model says, and its processes agree (exactly one
  running allocation with a live process while RUNNING or STOPPING_*, none otherwise);
- each experiment is in the model's state; at the end of a sequence every one is
  COMPLETED, CANCELED, ERROR or PAUSED with nothing running;
- no metric row twice, and the stored steps are the ones reported;
- every recorded checkpoint has its files; with no trial running, no checkpoint
  directory is unrecorded;
- a task token works only while its allocation runs.

Bounded for CI: ``DET_STATEFUL_EXAMPLES`` sequences (default 6: new random ones on every
run, so CI's runs add up; 50 for a deep search) of at most 10 steps on one master; set
``DET_STATEFUL_SHRINK=1`` to shrink a failure (slow: real processes).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from det_sdk.master.checkpoints import is_checkpoint_name
from det_sdk.storage import pid_alive
from harness.master import Cluster, running_cluster, wait_until
from tests.lifecycle_harness import Fakes, pid_gone

# Stack-neutral: TensorFlow-free trials drive the master's lifecycle.
pytestmark = pytest.mark.stack_neutral

SLOTS = 2  # the harness's master
MAX_RESTARTS = 1
ENDED = ("COMPLETED", "CANCELED", "ERROR")
WITH_PROCESS = ("RUNNING", "STOPPING_PAUSED", "STOPPING_CANCELED")


@dataclass
class Model:
    """What the test expects of one experiment (of one trial)."""

    exp_id: int
    trial_id: int
    exp: str = "ACTIVE"
    trial: str = "RUNNING"
    restarts: int = 0
    allocation: str | None = None  # the trial's current process
    ckpt_steps: int = 0  # the step of its latest recorded checkpoint
    steps: int = 0  # the step its process is at
    reported: set[int] = field(default_factory=set)
    allocations: set[str] = field(default_factory=set)

    @property
    def has_process(self) -> bool:
        return self.trial in WITH_PROCESS


class LifecycleMachine(RuleBasedStateMachine):
    fakes: Fakes  # set by the test (one master for all sequences)

    def __init__(self) -> None:
        super().__init__()
        self.models: dict[int, Model] = {}

    # --- helpers ----------------------------------------------------------------------------

    @property
    def cluster(self) -> Cluster:
        return self.fakes.cluster

    def _busy_slots(self) -> int:
        return sum(m.has_process for m in self.models.values())

    def _with_process(self) -> list[int]:
        return sorted(e for e, m in self.models.items() if m.has_process)

    def _live(self) -> list[int]:
        return sorted(e for e, m in self.models.items() if m.exp not in ENDED)

    def _started(self, m: Model) -> None:
        """The trial was (re)queued: wait for its new process; it resumes at its checkpoint."""
        proc = self.fakes.wait_started(m.trial_id, after=m.allocation)
        m.allocation = proc["allocation"]
        m.allocations.add(proc["allocation"])
        assert proc["resumed_from"] == m.ckpt_steps
        m.steps = m.ckpt_steps
        m.trial = "RUNNING"

    def _settled(self, m: Model) -> None:
        """Wait until the master shows the model's states for ``m``."""
        def there() -> bool:
            exp = self.fakes.experiment(m.exp_id)
            return (exp["state"], exp["trials"][0]["state"]) == (m.exp, m.trial)
        try:
            wait_until("the model's states", there, timeout=60, every=0.05)
        except AssertionError:
            exp = self.fakes.experiment(m.exp_id)
            raise AssertionError(
                f"experiment {m.exp_id}: expected {m.exp}/{m.trial}, the master shows "
                f"{exp['state']}/{exp['trials'][0]['state']}") from None

    def _exited(self, m: Model, code: int, finished: bool) -> None:
        """The model's lifecycle for a process exit (written apart from the master's)."""
        stopping = m.trial == "STOPPING_PAUSED"
        if code == 0 and (finished or not stopping):
            m.trial, m.exp = "COMPLETED", "COMPLETED"
        elif code == 0:
            m.trial = "PAUSED"
        elif m.restarts < MAX_RESTARTS:
            m.restarts += 1
            m.trial = "PAUSED" if stopping else "QUEUED"
        else:
            m.trial, m.exp = "ERROR", "ERROR"
        if m.trial == "PAUSED" and m.exp == "ACTIVE":
            m.trial = "QUEUED"  # paused, but activated while it stopped: runs again
        if m.trial == "PAUSED":
            m.exp = "PAUSED"
        if m.trial == "QUEUED":
            self._started(m)
        self._settled(m)

    def _pick(self, data: st.DataObject, choices: list[int]) -> Model:
        return self.models[data.draw(st.sampled_from(choices), label="experiment")]

    # --- user commands ----------------------------------------------------------------------

    @precondition(lambda self: self._busy_slots() < SLOTS and len(self._live()) < SLOTS)
    @rule(launch_fails=st.sampled_from([False, False, False, True]))
    def create(self, launch_fails: bool) -> None:
        if launch_fails:
            with self.fakes.http() as http:
                # the newest experiment holds the newest trial (lists are newest first)
                newest = http.get("/api/v1/experiments",
                                  params={"limit": 1}).json()["experiments"]
                last = max([t["id"] for e in newest for t in http.get(
                    f"/api/v1/experiments/{e['id']}/trials",
                    params={"limit": 1000}).json()["trials"]], default=0)
            blocker = self.cluster.data_dir / "trials" / str(last + 1)
            blocker.parent.mkdir(exist_ok=True)
            blocker.write_text("in the way: the launch fails")
        exp_id = self.fakes.create(max_restarts=MAX_RESTARTS)
        trial_id = self.fakes.trial_of(exp_id)["id"]
        m = Model(exp_id, trial_id)
        self.models[exp_id] = m
        if launch_fails:
            m.trial, m.exp = "ERROR", "ERROR"
            self._settled(m)
            assert "launch failed" in self.fakes.trial_of(exp_id)["last_error"]
        else:
            self._started(m)
            self._settled(m)

    @precondition(lambda self: self.models)
    @rule(data=st.data())
    def pause(self, data: st.DataObject) -> None:
        m = self._pick(data, sorted(self.models))
        with self.fakes.http() as http:
            r = http.post(f"/api/v1/experiments/{m.exp_id}/pause")
        if m.exp in ENDED:
            assert r.status_code == 409, r.text
            return
        assert r.status_code == 200, r.text
        if m.exp == "ACTIVE":
            if m.trial == "RUNNING":
                m.trial = "STOPPING_PAUSED"
            # STOPPING_PAUSED (activated while it stopped): it still stops
            m.exp = "STOPPING_PAUSED" if m.has_process else "PAUSED"
        assert r.json()["state"] == m.exp
        self._settled(m)

    @precondition(lambda self: self.models)
    @rule(data=st.data())
    def activate(self, data: st.DataObject) -> None:
        m = self._pick(data, sorted(self.models))
        if m.exp == "PAUSED" and self._busy_slots() >= SLOTS:
            return  # would queue behind the others: not what this model follows
        with self.fakes.http() as http:
            r = http.post(f"/api/v1/experiments/{m.exp_id}/activate")
        if m.exp in ENDED:
            assert r.status_code == 409, r.text
            return
        assert r.status_code == 200, r.text
        m.exp = "ACTIVE"
        if m.trial == "PAUSED":
            m.trial = "QUEUED"
            self._started(m)
        self._settled(m)

    @precondition(lambda self: self.models)
    @rule(data=st.data())
    def kill(self, data: st.DataObject) -> None:
        m = self._pick(data, sorted(self.models))
        with self.fakes.http() as http:
            r = http.post(f"/api/v1/experiments/{m.exp_id}/kill")
        assert r.status_code == 200, r.text
        if m.exp not in ENDED:
            m.trial, m.exp = "CANCELED", "CANCELED"
        self._settled(m)

    @rule()
    def restart_master(self) -> None:
        pid = int((self.cluster.data_dir / "master.pid").read_text())
        os.kill(pid, 9)
        wait_until("the master to die", lambda: pid_gone(pid))
        self.cluster.up()
        for m in self.models.values():
            self._settled(m)

    # --- what trials do -----------------------------------------------------------------------

    @precondition(lambda self: self._with_process())
    @rule(data=st.data())
    def report(self, data: st.DataObject) -> None:
        m = self._pick(data, self._with_process())
        m.steps = self.fakes.send(m.trial_id, "report")["steps"]
        m.reported.add(m.steps)  # a step repeated after a restart replaces its row

    @precondition(lambda self: self._with_process())
    @rule(data=st.data(), recorded=st.booleans())
    def checkpoint(self, data: st.DataObject, recorded: bool) -> None:
        m = self._pick(data, self._with_process())
        self.fakes.send(m.trial_id, "checkpoint" if recorded else "orphan_checkpoint")
        if recorded:
            m.ckpt_steps = m.steps

    @precondition(lambda self: self._with_process())
    @rule(data=st.data(), finished=st.booleans())
    def exit_zero(self, data: st.DataObject, finished: bool) -> None:
        m = self._pick(data, self._with_process())
        self.fakes.send(m.trial_id, "finish" if finished else "exit0")
        self._exited(m, 0, finished)

    @precondition(lambda self: self._with_process())
    @rule(data=st.data(), crash=st.booleans())
    def exit_failing(self, data: st.DataObject, crash: bool) -> None:
        m = self._pick(data, self._with_process())
        self.fakes.send(m.trial_id, "crash" if crash else "fail")
        self._exited(m, 137 if crash else 3, False)

    # --- invariants -----------------------------------------------------------------------------

    @invariant()
    def states_and_processes_agree(self) -> None:
        if not self.models:
            return
        with self.fakes.http() as http:
            exps = {m.exp_id: http.get(f"/api/v1/experiments/{m.exp_id}").json()
                    for m in self.models.values()}
        for m in self.models.values():
            exp = exps[m.exp_id]
            trial = exp["trials"][0]
            assert (exp["state"], trial["state"], trial["restarts"]) == (
                m.exp, m.trial, m.restarts), f"experiment {m.exp_id}"
            running = self.fakes.running_allocation(m.trial_id)
            if m.has_process:
                assert running is not None and running["id"] == m.allocation
                assert pid_alive(running["pid"])
            else:
                assert running is None, f"trial {m.trial_id} is {m.trial} with a process"
            for alloc in self.fakes.allocations(m.trial_id):
                if alloc["state"] != "RUNNING":
                    assert alloc["pid"] is None or pid_gone(alloc["pid"])

    @invariant()
    def metrics_once_each(self) -> None:
        with self.fakes.http() as http:
            for m in self.models.values():
                rows = http.get(f"/api/v1/trials/{m.trial_id}/metrics").json()
                keys = [(r["group"], r["steps_completed"]) for r in rows]
                assert len(keys) == len(set(keys)), f"trial {m.trial_id}: a row twice"
                assert {s for _, s in keys} == m.reported, f"trial {m.trial_id}"

    @invariant()
    def checkpoints_match_their_files(self) -> None:
        with self.fakes.http() as http:
            recorded = http.get("/api/v1/checkpoints",
                                params={"limit": 1000}).json()["checkpoints"]
        for c in recorded:
            assert Path(c["path"]).is_dir(), f"checkpoint {c['uuid']} has no files"
        if any(m.has_process for m in self.models.values()):
            return  # a running trial's report may be on its way
        base = self.cluster.data_dir / "checkpoints"
        on_disk = {p.name for p in base.iterdir() if is_checkpoint_name(p.name)} \
            if base.is_dir() else set()
        assert on_disk <= {c["uuid"] for c in recorded}, "unrecorded checkpoint directories"

    @invariant()
    def tokens_work_only_while_their_allocation_runs(self) -> None:
        for m in self.models.values():
            for alloc in self.fakes.allocations(m.trial_id):
                with httpx.Client(base_url=self.cluster.url, timeout=30, headers={
                        "Authorization": f"Bearer {alloc['token']}"}) as task:
                    status = task.get(f"/api/v1/trials/{m.trial_id}").status_code
                assert status == (200 if alloc["state"] == "RUNNING" else 401), alloc["id"]

    # --- the end of a sequence ------------------------------------------------------------------

    def teardown(self) -> None:
        """Let every trial stop as it would (obey a pause, or finish), then check that each
        experiment ended COMPLETED, CANCELED, ERROR or PAUSED with nothing running."""
        try:
            for _ in range(4):
                for m in self.models.values():
                    if m.trial == "STOPPING_PAUSED":
                        self.fakes.send(m.trial_id, "exit0")
                        self._exited(m, 0, False)
                    elif m.trial == "RUNNING":
                        self.fakes.send(m.trial_id, "finish")
                        self._exited(m, 0, True)
            for m in self.models.values():
                assert m.exp in (*ENDED, "PAUSED") and not m.has_process, m
                self._settled(m)
                assert self.fakes.running_allocation(m.trial_id) is None
        finally:
            # leave the master clean for the next sequence whatever happened
            for m in self.models.values():
                with self.fakes.http() as http:
                    http.post(f"/api/v1/experiments/{m.exp_id}/kill")


@pytest.mark.timeout(1800)  # 6 sequences take about 1.5 minutes here; more when asked for
def test_the_lifecycle_against_a_model(tmp_path_factory: pytest.TempPathFactory) -> None:
    root = tmp_path_factory.mktemp("stateful")
    # hypothesis keeps caches in ./.hypothesis: keep the checkout clean
    set_hypothesis_home_dir(str(root / ".hypothesis"))
    phases = [Phase.explicit, Phase.reuse, Phase.generate]
    if os.environ.get("DET_STATEFUL_SHRINK"):
        phases.append(Phase.shrink)
    with running_cluster(root) as cluster:
        LifecycleMachine.fakes = Fakes(cluster, root / "control")
        run_state_machine_as_test(LifecycleMachine, settings=settings(
            max_examples=int(os.environ.get("DET_STATEFUL_EXAMPLES", "6")),
            stateful_step_count=10, deadline=None, database=None, phases=phases,
            suppress_health_check=list(HealthCheck)))
    shutil.rmtree(root / "control", ignore_errors=True)
