"""A real master on 127.0.0.1 for tests: start it with the real `det` CLI, talk to it over httpx.

``Cluster`` wraps one master with its own HOME (credentials) and data directory;
the ``cluster`` fixture in conftest.py gives each test module one of them.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

from det_sdk.env import outside

DET = Path(sys.executable).with_name("det")
MODEL_DIR = Path(__file__).parent / "cluster_model"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.data_dir = root / "master"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = outside(keep=["DET_RUNS_DIR"], HOME=str(root / "home"),
                           DET_MASTER=self.url, TF_CPP_MIN_LOG_LEVEL="2")

    def det(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(DET), *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout, cwd=self.root)

    def up(self) -> None:
        out = self.det("master", "up", "--data-dir", str(self.data_dir), "--port",
                       str(self.port), "--slots", "2")
        assert out.returncode == 0, out.stderr

    def down(self) -> None:
        self.det("master", "down", "--data-dir", str(self.data_dir))

    @property
    def token(self) -> str:
        creds = json.loads((self.root / "home" / ".det" / "credentials.json").read_text())
        return creds[self.url]

    def http(self, token: str | None = "user") -> httpx.Client:
        headers = {}
        if token:
            headers["Authorization"] = f"Bearer {self.token if token == 'user' else token}"
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def write_config(self, name: str, **overrides: object) -> Path:
        config = {
            "name": name,
            "hyperparameters": {"learning_rate": 0.05, "global_batch_size": 16},
            "searcher": {"name": "single", "metric": "val_loss", "max_length": {"epochs": 2}},
            "entrypoint_script": "python3 train.py",
            "max_restarts": 2,
            # keep every checkpoint unless a test is about retention
            "checkpoint_storage": {"save_trial_latest": 100},
        }
        config.update(overrides)
        path = self.root / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        return path


@contextlib.contextmanager
def running_cluster(root: Path) -> Iterator[Cluster]:
    """A master under ``root`` for the duration of the block; stopped (and its trials) after."""
    c = Cluster(root)
    c.up()
    try:
        yield c
    finally:
        _stop_all(c)


def _stop_all(c: Cluster) -> None:
    c.down()
    # trials are process groups of their own: stop any a failing test left behind
    db = c.data_dir / "master.db"
    if db.exists():
        for (pid,) in sqlite3.connect(db).execute(
                "SELECT pid FROM allocations WHERE state = 'RUNNING'"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, 9)


def describe(cluster: Cluster, exp_id: int) -> dict:
    """`det experiment describe --json`, parsed."""
    out = cluster.det("experiment", "describe", str(exp_id), "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def create(cluster: Cluster, config: Path, model_dir: Path = MODEL_DIR, *extra: str) -> int:
    """`det experiment create`; the new experiment's id."""
    out = cluster.det("experiment", "create", str(config), str(model_dir), "--json", *extra)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return json.loads(out.stdout)["id"]


def run_to_the_end(cluster: Cluster, config: Path, model_dir: Path, what: str,
                   timeout: float = 300.0) -> tuple[int, dict, dict, str]:
    """Create a one-trial experiment and wait until it ends (COMPLETED, ERROR or
    CANCELED): its id, its description, its trial, and the trial's logs (for a failure
    message)."""
    exp = create(cluster, config, model_dir)
    wait_until(f"the {what} to finish",
               lambda: describe(cluster, exp)["state"] in ("COMPLETED", "ERROR", "CANCELED"),
               timeout=timeout)
    info = describe(cluster, exp)
    (trial,) = info["trials"]
    return exp, info, trial, cluster.det("trial", "logs", str(trial["id"])).stdout


def wait_until(what: str, cond: Callable[[], Any], timeout: float = 180.0,
               every: float = 0.1) -> Any:
    """Poll ``cond`` until it returns something truthy; fail with ``what`` after ``timeout``."""
    deadline = time.time() + timeout
    while True:
        value = cond()
        if value:
            return value
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(every)
