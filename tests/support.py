"""What test modules share that is not a fixture: the repository's paths, running a script
in a fresh Python process as a user would, and reading a JSON-lines file.

>>> SCRIPTS.relative_to(REPO).as_posix()
'tests/scripts'
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from det_sdk.env import outside

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
SCRIPTS = TESTS / "scripts"  # training scripts the tests run
STEERED_JOB = TESTS / "job_steering"  # a streamed-predict job that can be held and broken


def run_python(
    script: Path | str, env: dict[str, str], cwd: Path | None = None, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` with this interpreter and ``env`` added to the environment."""
    full_env = outside(keep=["DET_RUNS_DIR"], TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1",
                       **env)
    return subprocess.run(
        [sys.executable, str(script)], env=full_env, cwd=cwd or REPO, timeout=timeout,
        capture_output=True, text=True,
    )


#: the launchers in this interpreter's environment (absent ones: the tests that need them skip)
HOROVODRUN = Path(sys.executable).with_name("horovodrun")
TORCHRUN = Path(sys.executable).with_name("torchrun")
#: ``horovodrun`` as the master starts it for a multi-slot trial (det_sdk.launch.horovodrun:
#: horovodrun's own code, less its start-up probe, which forks a process that imports
#: TensorFlow on every launch: ~5.5 s of CPU and 6 s of wall time per run on 2 cores, 0.6 s
#: through this). The tests' N-process runs go through it; test_horovod's ``report`` run
#: keeps the user's own ``horovodrun`` binary.
HOROVOD_LAUNCH = [sys.executable, "-m", "det_sdk.launch.horovodrun"]


def launcher_argv(launcher: str, script: Path | str, processes: int = 2) -> list[str]:
    """The command that starts ``processes`` copies of ``script`` on this host, as a user
    would: ``horovodrun -np N --gloo`` (:data:`HOROVOD_LAUNCH`'s) or
    ``torchrun --nproc_per_node N --standalone``.

    >>> launcher_argv("torchrun", "s.py")[1:]
    ['--nproc_per_node', '2', '--standalone', 's.py']
    """
    if launcher == "horovodrun":
        return [*HOROVOD_LAUNCH, "-np", str(processes), "--gloo", sys.executable, str(script)]
    if launcher == "torchrun":
        return [str(TORCHRUN), "--nproc_per_node", str(processes), "--standalone", str(script)]
    raise ValueError(f"launcher_argv: horovodrun or torchrun, not {launcher!r}")


def launched_env(**env: str) -> dict[str, str]:
    """A launcher's environment: a plain shell's (no run's, task's or rank's variables), this
    checkout's det_sdk first on the path, ``env`` on top."""
    return outside(keep=["DET_RUNS_DIR"], TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1",
                   PYTHONPATH=str(REPO), **env)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSON-lines file (metrics.jsonl, checkpoints.jsonl, ...)."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def assert_arrays_equal(a: list[Any], b: list[Any]) -> None:
    """Two lists of arrays (weights, optimizer slots) equal bit for bit, pair by pair.

    >>> assert_arrays_equal([[1.0, 2.0]], [[1.0, 2.0]])
    """
    import numpy as np  # only the tests that compare arrays pay for it

    assert len(a) == len(b), (len(a), len(b))
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def steered_job_config(path: Path, out: Path, *, rows: int, batch: int, max_restarts: int,
                       slots: int = 1, **env: Any) -> Path:
    """Write the job config of :data:`STEERED_JOB` (``run.py``) to ``path``: ``rows`` rows
    in batches of ``batch`` streamed into ``out``, ``env`` its other switches."""
    import yaml

    variables = {"ROWS": rows, "BATCH": batch, "OUT": out, **env}
    path.write_text(yaml.safe_dump({
        "name": "steered", "entrypoint_script": "python3 run.py", "max_restarts": max_restarts,
        "resources": {"slots": slots},
        "environment": {"environment_variables": [f"{k}={v}" for k, v in variables.items()]}}))
    return path


def steered_job_reference(tmp: Path, *, rows: int, batch: int) -> Any:
    """What :data:`STEERED_JOB` writes uninterrupted (the script alone, one process)."""
    import det_sdk

    tmp.mkdir(parents=True, exist_ok=True)
    out = run_python(STEERED_JOB / "run.py", {
        "PYTHONPATH": str(REPO), "DET_RUNS_DIR": str(tmp / "runs"), "OUT": str(tmp / "out"),
        "ROWS": str(rows), "BATCH": str(batch)}, cwd=tmp, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return det_sdk.load_predictions(tmp / "out")


def pid_gone(pid: int) -> bool:
    """True once no process (not even a zombie) has this pid."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def process_ended(pid: int) -> bool:
    """True once ``pid`` runs no more: gone, or a zombie (it holds no file or lock)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True


def wait_for_lock_holder(lock: Path, bound: float = 60.0) -> None:
    """Wait, as a user who reads a ``PredictionsBusyError`` would, for the process named in
    the output's lock file (``process PID on HOST``) to end; fail if it outlives ``bound``.

    A killed launcher's ranks are not in its process group: ``horovodrun``'s end when
    Gloo sees their launcher gone (about 1.5 s), and a relaunch before then is refused
    (docs/horovod.md, "A killed launcher"). The bound is the promise that no rank whose
    launcher is gone runs on."""
    import re
    import time

    found = re.match(r"process (\d+) on ", lock.read_text()) if lock.exists() else None
    if found is None:
        return
    pid, deadline = int(found[1]), time.monotonic() + bound
    while not process_ended(pid):
        assert time.monotonic() < deadline, (
            f"process {pid} (holding {lock.name}) still runs {bound:.0f} s after its "
            "launcher was killed")
        time.sleep(0.05)


def keras3_installed() -> bool:
    """Whether Keras 3 is installed, read from its metadata (importing Keras would import a
    framework): the JAX and PyTorch backends' tests skip on the Keras 2 stack.

    >>> isinstance(keras3_installed(), bool)
    True
    """
    try:
        return int(importlib.metadata.version("keras").split(".")[0]) >= 3
    except importlib.metadata.PackageNotFoundError:
        return False
