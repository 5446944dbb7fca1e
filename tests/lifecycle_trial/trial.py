"""A trial without TensorFlow for the lifecycle tests: it speaks det_sdk's session protocol
(HTTP to the master with its task token) and does what the test tells it, one command
at a time, so that a test decides exactly when a trial reports, checkpoints, finishes,
fails, crashes or obeys a pause.

Commands arrive as files ``<control_dir>/<allocation id>/cmd-<n>`` (one word each); the
trial answers each with ``ack-<n>`` (JSON) before acting on it. On start it writes
``<control_dir>/trial-<id>.json``: its allocation id, pid and the step it resumes from.
``control_dir`` comes from the experiment config's ``data``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from det_sdk.client import MasterClient, MasterUnreachable
from det_sdk.storage import open_storage


def _write(path: Path, obj: object) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


def _call(fn, *args, **kwargs):
    deadline = time.time() + 120
    while True:
        try:
            return fn(*args, **kwargs)
        except MasterUnreachable:
            if time.time() > deadline:
                raise
            time.sleep(0.2)


def main() -> int:
    config = json.loads(os.environ["DET_EXPERIMENT_CONFIG"])
    control = Path(config["data"]["control_dir"])
    trial_id = int(os.environ["DET_TRIAL_ID"])
    alloc_id = os.environ["DET_ALLOCATION_ID"]
    client = MasterClient(os.environ["DET_MASTER"], os.environ["DET_SESSION_TOKEN"])
    storage = open_storage(config["checkpoint_storage"])  # the master filled in host_path
    latest = os.environ.get("DET_LATEST_CHECKPOINT")
    step = 0
    if latest:
        step = json.loads((storage.path(latest) / "state.json").read_text())["steps"]
    inbox = control / alloc_id
    inbox.mkdir(parents=True, exist_ok=True)
    _write(control / f"trial-{trial_id}.json",
           {"allocation": alloc_id, "pid": os.getpid(), "resumed_from": step})
    n = 1
    while True:
        cmd_file = inbox / f"cmd-{n}"
        if not cmd_file.exists():
            time.sleep(0.02)
            continue
        cmd = cmd_file.read_text().strip()
        result: dict[str, object] = {"cmd": cmd}
        if cmd == "report":
            step += 1
            _call(client.report_metrics, trial_id, {
                "group": "training", "steps_completed": step, "epoch": 0,
                "metrics": {"loss": 1.0 / step, "nan": "NaN"}})
            result["steps"] = step
        elif cmd == "checkpoint":
            with storage.store() as (uuid, path):
                (path / "state.json").write_text(json.dumps({"steps": step}))
            _call(client.report_checkpoint, {"uuid": uuid, "trial_id": trial_id,
                                             "steps_completed": step, "epoch": 0,
                                             "metrics": {"loss": 0.5}})
            result["uuid"] = uuid
        elif cmd == "orphan_checkpoint":  # written, never reported: as if killed between
            with storage.store() as (uuid, path):
                (path / "state.json").write_text(json.dumps({"steps": step}))
            result["uuid"] = uuid
        elif cmd == "finish":  # the searcher's last operation done, then exit 0
            op = _call(client.searcher_operation, trial_id)
            _call(client.complete_operation, trial_id, op["unit"], op["length"], 0.1)
        elif cmd == "env":
            result["env"] = sorted(k for k in os.environ if k.startswith("DET_"))
            result["umask"] = os.umask(0o022)
        elif cmd == "preempted":
            result["preempt"] = _call(client.preemption, alloc_id, timeout_seconds=0)
        _write(inbox / f"ack-{n}", result)
        n += 1
        if cmd in ("exit0", "finish"):
            return 0
        if cmd == "fail":
            return 3
        if cmd == "crash":
            os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main())
