"""Determined's surface (issue 29): configs of both eras, CLI habits and small names.

This module's other half, the tests that start no process:
tests/integration/test_determined_compat.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# Stack-neutral: this module tests the master, the CLI or the UI; Keras is at most the workload.
pytestmark = pytest.mark.stack_neutral

DET = Path(sys.executable).with_name("det")


def test_cli_aliases_and_host_port(tmp_path: Path) -> None:
    from det_sdk.cli.main import build_parser

    parser = build_parser()
    for argv, func in ((["e", "ls"], "experiment_list"), (["t", "logs", "3"], "trial_logs"),
                       (["c", "ls"], "checkpoint_list"), (["j", "batches"], "job_batches"),
                       (["experiment", "unpause", "2"], "experiment_activate")):
        assert parser.parse_args(argv).func.__name__ == func
    # Determined's `det job list` is its scheduler's queue (det_sdk's batch jobs: batches)
    assert parser.parse_args(["j", "ls"]).func.__name__ == "job_queue"
    env = {"HOME": str(tmp_path), "DET_MASTER": "127.0.0.1:1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([str(DET), "e", "ls"], env=env, capture_output=True, text=True)
    assert out.returncode == 1 and "no token for http://127.0.0.1:1" in out.stderr
    (tmp_path / ".det").mkdir()
    (tmp_path / ".det" / "credentials.json").write_text(json.dumps({"http://127.0.0.1:1": "t"}))
    out = subprocess.run([str(DET), "-m", "127.0.0.1:1", "e", "ls"], env=env,
                         capture_output=True, text=True)
    # the saved token was found: the error is now that nothing answers there
    assert out.returncode == 1 and "no token" not in out.stderr and "127.0.0.1:1" in out.stderr
    out = subprocess.run([str(DET), "-m", "ftp://x", "e", "ls"], env=env,
                         capture_output=True, text=True)
    assert out.returncode == 1 and "master address 'ftp://x'" in out.stderr
