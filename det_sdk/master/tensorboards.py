"""TensorBoard servers the master runs for ``det tensorboard start`` (Determined's
``POST /api/v1/tensorboards``), lists, kills and forgets at its own end.

Why not the resource manager (``det_sdk.master.resources``), which runs trials and jobs:
a TensorBoard takes no slot, reads event files the master can read itself, and serves
HTTP that must be reachable where the master is. Under Slurm a compute node's port is not
the master's, and queueing a viewer behind training would make it wait for slots. So the
master runs TensorBoard as its own child process, beside itself, whatever the resource
manager is; this module is the one place that does.

- The URL: TensorBoard's own port on the master's host, not a path the master proxies
  (Determined's way): TensorBoard's pages stay out of the master's origin, where their
  scripts would run beside the web UI's signed-in session.
- The port: TensorBoard binds it itself (``--port 0``: the kernel picks a free one, no
  "find a free port, bind it later" race) and writes it to its info file, which the
  child's private ``TMPDIR`` puts at a known path (``tensorboard.manager``'s
  ``<tmp>/.tensorboard-info/pid-<pid>.info``). The record is RUNNING once it is there.
- The record of each (``records.json`` under ``root``): STARTING, RUNNING or TERMINATED
  (Determined's states), with its experiments and trials, port and exit status.
- At the master's stop (``stop``) every TensorBoard it runs is killed; a master that
  starts after one that died (``recover``) kills what the previous one left running and
  marks those records TERMINATED: no record ever shows a URL nothing serves.
- A start over the same trials as one that starts or serves answers that one; at most
  ``MAX_LIVE`` run at once (each is a process that may import TensorFlow).
- Each TensorBoard's output goes to ``<root>/<id>/tensorboard.log`` (``det tensorboard
  logs``).

>>> import tempfile
>>> tbs = TensorBoards(Path(tempfile.mkdtemp()), host="127.0.0.1")
>>> tbs.list()
[]
>>> logdir_spec([Source(1, 2, "/ckpt/tensorboard/1/trial_2")])
'trial_2:/ckpt/tensorboard/1/trial_2'
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from det_sdk.atomic import write_atomic
from det_sdk.master.errors import Conflict, InvalidRequest, NotFound
from det_sdk.storage import pid_alive

__all__ = ["MAX_LIVE", "MAX_TRIALS", "Source", "TensorBoards", "logdir_spec", "served_port",
           "tensorboard_dir"]

log = logging.getLogger("det_sdk.master.tensorboards")

MAX_TRIALS = 100  # Determined's limit of trials per TensorBoard
MAX_LIVE = 8  # TensorBoards running at once (each is a process that may import TensorFlow)
KEEP_ENDED = 100  # TERMINATED records kept (the newest); older ones are forgotten
KILL_GRACE_SECONDS = 10.0
_ENV_MARK = "DET_TENSORBOARD_ID"  # in the process's environment: which record it serves


def tensorboard_dir(checkpoint_dir: Path, experiment_id: int, trial_id: int) -> Path:
    """Where a cluster trial writes its TensorBoard event files (``MasterSession``).

    >>> tensorboard_dir(Path("/ckpt"), 3, 7).as_posix()
    '/ckpt/tensorboard/3/trial_7'
    """
    return checkpoint_dir / "tensorboard" / str(experiment_id) / f"trial_{trial_id}"


@dataclass(frozen=True)
class Source:
    """One trial's TensorBoard directory (it may not exist yet: TensorBoard picks it up)."""

    experiment_id: int
    trial_id: int
    path: str


def logdir_spec(sources: list[Source]) -> str:
    """TensorBoard's ``--logdir_spec``: ``name:path`` pairs, a run per trial, named
    ``exp<E>_trial_<T>`` when the trials come from more than one experiment.

    >>> logdir_spec([Source(1, 2, "/a"), Source(3, 4, "/b")])
    'exp1_trial_2:/a,exp3_trial_4:/b'
    """
    many = len({s.experiment_id for s in sources}) > 1
    for s in sources:
        if "," in s.path:  # the spec's separator: TensorBoard would split the path
            raise InvalidRequest(f"trial {s.trial_id}: its TensorBoard directory {s.path!r} "
                                 "has a comma, which TensorBoard's --logdir_spec cannot hold")
    return ",".join(f"{f'exp{s.experiment_id}_' if many else ''}trial_{s.trial_id}:{s.path}"
                    for s in sources)


def served_port(tmp_dir: Path, pid: int) -> int | None:
    """The port TensorBoard's process ``pid``, started with ``TMPDIR=tmp_dir`` and
    ``--port 0``, bound: from the info file it writes once it listens (None before).

    >>> served_port(Path("/nonexistent"), 1) is None
    True
    """
    info = tmp_dir / ".tensorboard-info" / f"pid-{pid}.info"
    try:
        return int(json.loads(info.read_text())["port"])
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None


def _describe(experiment_ids: list[int], trial_ids: list[int]) -> str:
    parts = []
    if experiment_ids:
        parts.append(("experiment " if len(experiment_ids) == 1 else "experiments ")
                     + ", ".join(map(str, experiment_ids)))
    if trial_ids:
        parts.append(("trial " if len(trial_ids) == 1 else "trials ")
                     + ", ".join(map(str, trial_ids)))
    return f"TensorBoard ({'; '.join(parts)})"


class TensorBoards:
    """The TensorBoard processes of one master, and their records under ``root``.

    ``host``: the address they listen on (the master's). Thread-safe: the routes call it
    from FastAPI's thread pool.
    """

    def __init__(self, root: Path, host: str, python: str = sys.executable) -> None:
        self.root, self.host, self.python = root, host, python
        self._lock = threading.Lock()
        self._procs: dict[str, subprocess.Popen[bytes]] = {}  # the ones this master runs
        self._records: dict[str, dict[str, Any]] = self._load()

    # --- records -------------------------------------------------------------------------

    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            rows = json.loads((self.root / "records.json").read_text())
        except FileNotFoundError:
            return {}
        return {r["id"]: r for r in rows}

    def _save(self) -> None:
        ended = sorted((r for r in self._records.values() if r["state"] == "TERMINATED"),
                       key=lambda r: r["start_time"])
        for r in ended[:-KEEP_ENDED]:
            del self._records[r["id"]]
        self.root.mkdir(parents=True, exist_ok=True)
        write_atomic(self.root / "records.json",
                     json.dumps(list(self._records.values()), indent=1) + "\n", mode=0o600)

    def log_path(self, tb_id: str) -> Path:
        return self.root / tb_id / "tensorboard.log"

    def _ended(self, rec: dict[str, Any], status: str) -> None:
        rec.update(state="TERMINATED", exit_status=status, port=None, end_time=time.time())
        self._procs.pop(rec["id"], None)

    def _refresh(self, rec: dict[str, Any]) -> None:
        """A STARTING record becomes RUNNING once TensorBoard wrote its port, TERMINATED
        once its process has exited."""
        proc = self._procs.get(rec["id"])
        if rec["state"] == "TERMINATED" or proc is None:
            return
        code = proc.poll()
        if code is not None:
            what = "before it served" if rec["state"] == "STARTING" else "exited"
            self._ended(rec, f"{what} with code {code}: det tensorboard logs {rec['id']}")
            self._save()
            return
        if rec["state"] == "STARTING":
            port = served_port(self.root / rec["id"] / "tmp", proc.pid)
            if port is not None:
                rec.update(port=port, state="RUNNING")
                self._save()

    def _out(self, rec: dict[str, Any]) -> dict[str, Any]:
        port = rec.get("port")
        url = f"http://{self.host}:{port}/" if rec["state"] == "RUNNING" and port else None
        return {k: v for k, v in {**rec, "url": url}.items() if k != "pid"}

    # --- what the routes call ------------------------------------------------------------

    def start(self, sources: list[Source], experiment_ids: list[int], trial_ids: list[int],
              description: str | None = None, owner_id: int | None = None) -> dict[str, Any]:
        """Start a TensorBoard over ``sources``; its record (STARTING)."""
        if not sources:
            raise InvalidRequest("experiment_ids, trial_ids: no trials to show")
        if len(sources) > MAX_TRIALS:
            raise InvalidRequest(f"experiment_ids, trial_ids: {len(sources)} trials, over "
                                 f"Determined's limit of {MAX_TRIALS} per TensorBoard")
        spec = logdir_spec(sources)
        trials = sorted({s.trial_id for s in sources})
        with self._lock:  # the check and the start as one: no two over the same trials
            # one over the same trials already starts or serves: that one (as Determined's
            # web UI opens the TensorBoard of an experiment that has one)
            for rec in self._records.values():
                self._refresh(rec)
                if rec["state"] != "TERMINATED" and sorted(rec["trials"]) == trials:
                    return self._out(rec)
            live = sum(r["state"] != "TERMINATED" for r in self._records.values())
            if live >= MAX_LIVE:
                raise Conflict(f"{live} TensorBoards run on this master, its limit: "
                               "det tensorboard kill one first")
            rec = self._spawn(spec, sources, experiment_ids, trial_ids, description)
            self._records[rec["id"]]["user_id"] = owner_id  # who started it (issue 59)
            self._save()
            return {**rec, "user_id": owner_id}

    def _spawn(self, spec: str, sources: list[Source], experiment_ids: list[int],
               trial_ids: list[int], description: str | None) -> dict[str, Any]:
        tb_id = str(uuid.uuid4())
        home = self.root / tb_id
        (home / "tmp").mkdir(parents=True, mode=0o700)
        env = {**os.environ, "TMPDIR": str(home / "tmp"), _ENV_MARK: tb_id,
               "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
        cmd = [self.python, "-m", "tensorboard.main", "--logdir_spec", spec,
               "--host", self.host, "--port", "0", "--reload_interval", "5"]
        with open(self.log_path(tb_id), "ab") as out:
            proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, cwd=home,
                                    start_new_session=True)
        self._procs[tb_id] = proc
        rec = {"id": tb_id, "state": "STARTING",
               "description": description or _describe(experiment_ids, trial_ids),
               "experiment_ids": experiment_ids, "trial_ids": trial_ids,
               "trials": [s.trial_id for s in sources], "pid": proc.pid, "port": None,
               "exit_status": None, "start_time": time.time(), "end_time": None}
        self._records[tb_id] = rec
        self._save()
        log.info("TensorBoard %s started (pid %d) over %d trials", tb_id, proc.pid,
                 len(sources))
        return self._out(rec)

    def list(self) -> list[dict[str, Any]]:
        """Every record, oldest first."""
        with self._lock:
            for rec in self._records.values():
                self._refresh(rec)
            return [self._out(r) for r in sorted(self._records.values(),
                                                key=lambda r: r["start_time"])]

    def _find(self, tb_id: str) -> dict[str, Any]:
        """The record of ``tb_id``, or of the one id it begins (Determined's prefixes)."""
        rec = self._records.get(tb_id)
        if rec is None:
            found = [r for i, r in self._records.items() if tb_id and i.startswith(tb_id)]
            if len(found) > 1:
                raise InvalidRequest(f"tensorboard id {tb_id!r}: the beginning of "
                                     f"{len(found)} TensorBoards' ids; give more of it")
            if not found:
                raise NotFound(f"no TensorBoard {tb_id!r} (det tensorboard list)")
            rec = found[0]
        return rec

    def get(self, tb_id: str) -> dict[str, Any]:
        with self._lock:
            rec = self._find(tb_id)
            self._refresh(rec)
            return self._out(rec)

    def kill(self, tb_id: str) -> dict[str, Any]:
        """Stop its process (TERM, then KILL after a grace); an ended one stays as it is."""
        with self._lock:
            rec = self._find(tb_id)
            self._refresh(rec)
            if rec["state"] != "TERMINATED":
                self._stop_process(rec)
                self._ended(rec, "killed")
                self._save()
            return self._out(rec)

    def stop(self) -> None:
        """The master stops: so does every TensorBoard it runs."""
        with self._lock:
            for rec in self._records.values():
                if rec["state"] != "TERMINATED":
                    self._stop_process(rec)
                    self._ended(rec, "killed: the master stopped")
            self._save()

    def recover(self) -> None:
        """At the master's start: what a previous master left STARTING or RUNNING (it died
        without its ``stop``) is killed if its process is still there, and TERMINATED."""
        with self._lock:
            for rec in self._records.values():
                if rec["state"] != "TERMINATED" and rec["id"] not in self._procs:
                    if _serves(rec["pid"], rec["id"]):
                        _kill_group(rec["pid"], None)
                    self._ended(rec, "killed: the master that ran it stopped")
            if self._records:
                self._save()

    def _stop_process(self, rec: dict[str, Any]) -> None:
        proc = self._procs.get(rec["id"])
        if proc is not None:
            _kill_group(proc.pid, proc)
        elif _serves(rec["pid"], rec["id"]):
            _kill_group(rec["pid"], None)


def _serves(pid: int, tb_id: str) -> bool:
    """Whether ``pid`` is still that TensorBoard (not a later process that got its pid)."""
    if not pid_alive(pid):
        return False
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False  # not Linux, or not ours: leave it alone
    return f"{_ENV_MARK}={tb_id}".encode() in environ.split(b"\0")


def _kill_group(pid: int, proc: subprocess.Popen[bytes] | None) -> None:
    """TERM its process group, KILL it after ``KILL_GRACE_SECONDS``; reap our child."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_SECONDS), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        deadline = time.time() + wait
        while time.time() < deadline:
            if proc is not None:
                if proc.poll() is not None:
                    return
            elif not pid_alive(pid):
                return
            time.sleep(0.05)
