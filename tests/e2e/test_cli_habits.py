"""The `det` CLI as Unix users pipe it and as `DET_MASTER` names a master (issue 38).

The other half, without processes: tests/unit/test_cli_habits.py.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from harness.master import DET, Cluster

# Stack-neutral: this module tests the master, the CLI or the UI; Keras is at most the workload.
pytestmark = pytest.mark.stack_neutral


def test_a_closed_pipe_ends_det_quietly(cluster: Cluster) -> None:
    """`det experiment list | head -1`: the reader is gone before det writes."""
    read, write = os.pipe()
    os.close(read)
    try:
        out = subprocess.run([str(DET), "experiment", "list"], env=cluster.env, stdout=write,
                             stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write)
    assert out.returncode == 141 and out.stderr == "", out.stderr


def test_master_status_finds_the_data_dir_of_the_master_det_master_names(
        cluster: Cluster) -> None:
    """The module's master was started with --data-dir; `status` is given only DET_MASTER."""
    out = cluster.det("master", "status", "--json")
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)
    assert status["running"] and status["url"] == cluster.url
    assert status["data_dir"] == str(cluster.data_dir.resolve()) and status["pid"]
