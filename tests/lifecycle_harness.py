"""Trials without TensorFlow on a real master, told what to do one command at a time.

The trial program is ``tests/lifecycle_trial/trial.py``; this module creates its
experiments, finds each trial's current process and sends it commands (see the
trial's docstring). Used by the lifecycle regression tests and the stateful test.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from det_sdk.master.archive import pack
from harness.master import Cluster, wait_until

TRIAL_DIR = Path(__file__).parent / "lifecycle_trial"
ENDED = ("COMPLETED", "CANCELED", "ERROR")


def config(control: Path, name: str = "fake", max_restarts: int = 1,
           **overrides: Any) -> dict[str, Any]:
    """An experiment of one fake trial (searcher length: 100 batches)."""
    cfg: dict[str, Any] = {
        "name": name, "entrypoint_script": "python3 trial.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 100}},
        "max_restarts": max_restarts, "data": {"control_dir": str(control)},
        "checkpoint_storage": {"save_trial_latest": 2, "save_trial_best": 0},
    }
    cfg.update(overrides)
    return cfg


class Fakes:
    """Experiments of fake trials on ``cluster``, created and driven over HTTP."""

    def __init__(self, cluster: Cluster, control: Path) -> None:
        self.cluster = cluster
        self.control = control
        control.mkdir(parents=True, exist_ok=True)
        self.archive = base64.b64encode(pack(TRIAL_DIR)).decode()

    def http(self) -> Any:
        return self.cluster.http()

    def create(self, **overrides: Any) -> int:
        with self.http() as http:
            r = http.post("/api/v1/experiments", json={
                "config": config(self.control, **overrides), "model_definition": self.archive})
        assert r.status_code == 201, r.text
        return r.json()["id"]

    def experiment(self, exp_id: int) -> dict[str, Any]:
        with self.http() as http:
            r = http.get(f"/api/v1/experiments/{exp_id}")
        assert r.status_code == 200, r.text
        return r.json()

    def trial_of(self, exp_id: int) -> dict[str, Any]:
        (trial,) = self.experiment(exp_id)["trials"]
        return trial

    def command(self, exp_id: int, verb: str) -> dict[str, Any]:
        with self.http() as http:
            r = http.post(f"/api/v1/experiments/{exp_id}/{verb}")
        assert r.status_code == 200, r.text
        return r.json()

    # --- the trial's process ------------------------------------------------------------

    def process(self, trial_id: int) -> dict[str, Any] | None:
        """What the trial's latest process wrote on start (allocation, pid, resumed_from)."""
        path = self.control / f"trial-{trial_id}.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def running_allocation(self, trial_id: int) -> dict[str, Any] | None:
        rows = self.allocations(trial_id)
        running = [a for a in rows if a["state"] == "RUNNING"]
        assert len(running) <= 1, f"trial {trial_id} has {len(running)} running allocations"
        return running[0] if running else None

    def allocations(self, trial_id: int | None = None) -> list[dict[str, Any]]:
        db = sqlite3.connect(f"file:{self.cluster.data_dir / 'master.db'}?mode=ro", uri=True)
        db.row_factory = sqlite3.Row
        try:
            if trial_id is None:
                rows = db.execute("SELECT * FROM allocations ORDER BY started").fetchall()
            else:
                rows = db.execute("SELECT * FROM allocations WHERE trial_id = ? ORDER BY started",
                                  (trial_id,)).fetchall()
        finally:
            db.close()
        return [dict(r) for r in rows]

    def start_trial(self, **overrides: Any) -> tuple[int, int, dict[str, Any]]:
        """Create a one-trial experiment and wait for its process: (exp id, trial id, process)."""
        exp_id = self.create(**overrides)
        trial_id = self.trial_of(exp_id)["id"]
        return exp_id, trial_id, self.wait_started(trial_id)

    def wait_started(self, trial_id: int, after: str | None = None,
                     timeout: float = 60) -> dict[str, Any]:
        """Wait until the trial runs a process (another one than allocation ``after``)."""
        def started() -> dict[str, Any] | None:
            p = self.process(trial_id)
            return p if p and p["allocation"] != after else None
        return wait_until(f"trial {trial_id} to start", started, timeout=timeout, every=0.05)

    def send(self, trial_id: int, cmd: str, timeout: float = 60) -> dict[str, Any]:
        """Send ``cmd`` to the trial's current process; its answer."""
        proc = self.process(trial_id)
        assert proc is not None, f"trial {trial_id} never started"
        inbox = self.control / proc["allocation"]
        n = 1
        while (inbox / f"cmd-{n}").exists():
            n += 1
        tmp = inbox / f".cmd-{n}.tmp"
        tmp.write_text(cmd)
        os.replace(tmp, inbox / f"cmd-{n}")
        ack = inbox / f"ack-{n}"
        wait_until(f"trial {trial_id} to do {cmd}", ack.exists, timeout=timeout, every=0.02)
        for _ in range(50):
            try:
                return json.loads(ack.read_text())
            except ValueError:
                time.sleep(0.01)
        raise AssertionError(f"unreadable answer of trial {trial_id} to {cmd}")

    def wait_state(self, exp_id: int, trial_state: str, exp_state: str | None = None,
                   timeout: float = 60) -> dict[str, Any]:
        def there() -> dict[str, Any] | None:
            exp = self.experiment(exp_id)
            ok = exp["trials"][0]["state"] == trial_state and (
                exp_state is None or exp["state"] == exp_state)
            return exp if ok else None
        try:
            return wait_until(f"trial {trial_state}, experiment {exp_state}", there,
                              timeout=timeout, every=0.05)
        except AssertionError:
            exp = self.experiment(exp_id)
            raise AssertionError(f"expected trial {trial_state} / experiment {exp_state}, got "
                                 f"{exp['trials'][0]['state']} / {exp['state']}") from None


def pid_gone(pid: int) -> bool:
    """True once no live process (a zombie counts as gone) has this pid."""
    from det_sdk.storage import pid_alive

    return not pid_alive(pid)
