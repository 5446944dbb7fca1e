"""A real master on 127.0.0.1, started with the real `det` CLI and talked to over httpx.

The one harness of the tests and the benchmarks: ``Cluster`` is one master with its own
HOME (credentials) and data directory under a root of the caller's; the end-to-end tests'
``cluster`` fixture (tests/e2e/conftest.py) gives each test module one, the cluster
benchmarks (``scripts/bench/``) start and stop theirs with ``up()`` and ``stop()``.

(It starts processes, so its example is not run as a doctest)::

    with running_cluster(Path(tempfile.mkdtemp())) as c:
        exp_id = create(c, c.write_config("demo"))
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import yaml

from det_sdk.env import outside
from det_sdk.launch.ports import unused_port

DET = Path(sys.executable).with_name("det")
REPO = Path(__file__).resolve().parents[1]
MODEL_DIR = REPO / "tests" / "cluster_model"  # a small Keras trial most cluster tests run


def free_port() -> int:
    """A TCP port of 127.0.0.1 free now (a master's, a rendezvous's), outside the ephemeral
    range: no connection of a test running beside can take it before its server binds."""
    return unused_port()


class Cluster:
    """A master under ``root`` (data in ``root/master``, HOME and credentials in
    ``root/home``) on a free port of 127.0.0.1, with ``slots`` of the local resource
    manager, or ``options`` given to `det master up` in their place (another resource
    manager); ``env`` is added to the environment of every `det` it runs."""

    def __init__(self, root: Path, slots: int = 2, *, options: Sequence[str] = (),
                 env: Mapping[str, str] | None = None) -> None:
        self.root = root
        self.data_dir = root / "master"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.options = list(options) or ["--slots", str(slots)]
        self.env = outside(keep=["DET_RUNS_DIR"], HOME=str(root / "home"),
                           DET_MASTER=self.url, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))

    def det(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run ``det ARGS`` against this master (in ``root``)."""
        # the tests' CPU record (DET_TEST_CPU) moves this directory from test to test: a
        # det call reports to the test that makes it, not to the one that started the master
        probe = {k: v for k, v in os.environ.items() if k == "DET_TEST_CPU_DIR"}
        return subprocess.run([str(DET), *args], env={**self.env, **probe}, capture_output=True,
                              text=True, timeout=timeout, cwd=self.root)

    def det_json(self, *args: str) -> Any:
        """``det ARGS --json``, parsed; a failure raises with det's message."""
        out = self.det(*args, "--json")
        if out.returncode != 0:
            raise RuntimeError(f"det {' '.join(args)}: {out.stdout[-2000:]}{out.stderr.strip()}")
        return json.loads(out.stdout)

    def up(self) -> None:
        """`det master up`; raises with its message when the master does not start."""
        out = self.det("master", "up", "--data-dir", str(self.data_dir), "--port",
                       str(self.port), *self.options)
        if out.returncode != 0:
            raise RuntimeError(f"det master up: {out.stderr.strip()}")

    def down(self) -> None:
        """`det master down`: the master only (trials it started keep running, as after
        a crash: a restart test re-attaches to them)."""
        self.det("master", "down", "--data-dir", str(self.data_dir))

    def stop(self) -> None:
        """The master, then any trial's process group still running (what a failing test
        or an interrupted benchmark left behind: trials are process groups of their own)."""
        self.down()
        db = self.data_dir / "master.db"
        if not db.exists():
            return
        with contextlib.closing(sqlite3.connect(db)) as conn:
            pids = [pid for (pid,) in conn.execute(
                "SELECT pid FROM allocations WHERE state = 'RUNNING'")]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError, TypeError):
                os.killpg(pid, 9)

    @property
    def token(self) -> str:
        """The user token `det master up` saved for the CLI."""
        creds = json.loads((self.root / "home" / ".det" / "credentials.json").read_text())
        return creds[self.url]

    def http(self, token: str | None = "user") -> httpx.Client:
        """An httpx client of the master's API, signed in as the user (or with ``token``,
        or with none)."""
        headers = {}
        if token:
            headers["Authorization"] = f"Bearer {self.token if token == 'user' else token}"
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def write_config(self, name: str, **overrides: object) -> Path:
        """A one-trial experiment config (``single`` searcher, 2 epochs, every checkpoint
        kept) under ``root``, top-level fields replaced by ``overrides``; its path."""
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
def running_cluster(root: Path, slots: int = 2, **kwargs: Any) -> Iterator[Cluster]:
    """A master under ``root`` for the duration of the block; stopped (and its trials) after."""
    c = Cluster(root, slots, **kwargs)
    c.up()
    try:
        yield c
    finally:
        c.stop()


def describe(cluster: Cluster, exp_id: int) -> dict:
    """The experiment with its first page of trials: what `det experiment describe --json`
    prints (the same GET of the master's API), read in this process. The tests poll it
    every 0.1 s while they wait; a `det` process per poll cost about 0.2 s of CPU, which on
    2 cores slowed the very trials being waited for (the CLI's own describe has its tests:
    test_master_lifecycle.py, test_master_paging.py)."""
    r = api(cluster).get(f"/api/v1/experiments/{exp_id}")
    assert r.status_code == 200, r.text
    return r.json()


_CLIENTS: dict[str, httpx.Client] = {}


def api(cluster: Cluster) -> httpx.Client:
    """One client of the master's API per master (and token), for the tests' polls:
    making an httpx client (its TLS context) costs about 36 ms of CPU, a poll's worth many
    times over. No connection is kept between calls, so a master restarted on its port is
    reached afresh."""
    key = f"{cluster.url} {cluster.token}"
    if key not in _CLIENTS:
        _CLIENTS[key] = httpx.Client(
            base_url=cluster.url, timeout=30, limits=httpx.Limits(max_keepalive_connections=0),
            headers={"Authorization": f"Bearer {cluster.token}"})
    return _CLIENTS[key]


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


def read_log(cluster: Cluster, path: str) -> str:
    """A whole log from the master's API (``/api/v1/trials/{id}/logs`` or
    ``/api/v1/jobs/{id}/logs``, read a page at a time from offset 0): what `det trial
    logs` or `det job logs` prints, without a `det` process."""
    parts: list[str] = []
    offset = 0
    while True:
        r = api(cluster).get(path, params={"offset": offset})
        assert r.status_code == 200, r.text
        chunk = r.json()
        if not chunk["text"]:
            return "".join(parts)
        parts.append(chunk["text"])
        offset = chunk["offset"]


def trial_logs(cluster: Cluster, trial_id: int) -> str:
    """The trial's whole log, read over HTTP (:func:`read_log`)."""
    return read_log(cluster, f"/api/v1/trials/{trial_id}/logs")


def log_tails(cluster: Cluster, exp_id: int, chars: int = 4000) -> str:
    """Each trial of the experiment: its state, epoch and the tail of its log."""
    return "".join(f"\n--- trial {t['id']} ({t['state']}, epoch {t.get('epoch')}) log's "
                   f"tail:\n{trial_logs(cluster, t['id'])[-chars:]}"
                   for t in describe(cluster, exp_id)["trials"])


@contextlib.contextmanager
def logs_on_failure(cluster: Cluster, exp_id: int) -> Iterator[None]:
    """Whatever fails in the block (an assertion, pytest-timeout's signal), the trials'
    logs are printed first: the test's report shows them (captured stdout)."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            print(f"experiment {exp_id}:{log_tails(cluster, exp_id)}", flush=True)
        raise


def wait_for_experiment(cluster: Cluster, exp_id: int, what: str, timeout: float,
                        states: Sequence[str] = ("COMPLETED", "ERROR", "CANCELED")) -> dict:
    """Poll the experiment until it is in one of ``states`` (by default: ended), at most
    ``timeout`` seconds; its description. Past the deadline it fails with each trial's
    state and the tail of its log (the trial may have hung: its log says where)."""
    deadline = time.time() + timeout
    while True:
        exp = describe(cluster, exp_id)
        if exp["state"] in states:
            return exp
        if time.time() > deadline:
            raise AssertionError(f"{what}: experiment {exp_id} still {exp['state']} after "
                                 f"{timeout:.0f} s{log_tails(cluster, exp_id)}")
        time.sleep(0.3)


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
