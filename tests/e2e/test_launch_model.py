"""Determined's launch model: an `entrypoint:` command runs once per node and starts the
node's workers itself; `entrypoint_script:` and `module:Class` run once per slot.

Fast: how a config is read, ClusterInfo's container fields, the launchers' arguments.
Slow (a real master): the Core API tutorial's distributed shape on 2 slots, its own
launcher spawning `len(slot_ids)` workers through `determined.launch.wrap_rank`.

This module's other half, the tests that start no process: tests/unit/test_launch_model.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.master import Cluster, create, describe

# Stack-neutral: launchers and the Core API tutorial train no Keras model.
pytestmark = pytest.mark.stack_neutral

HERE = Path(__file__).resolve().parents[1]  # tests/
TUTORIAL = HERE / "core_api_tutorial"


def test_core_api_distributed_tutorial_on_two_slots(cluster: Cluster, tmp_path: Path) -> None:
    """Its launcher runs once (per node), starts 2 workers through
    determined.launch.wrap_rank; they allgather over TCP with no Horovod, torch or TF."""
    model = tmp_path / "model"
    shutil.copytree(TUTORIAL, model)
    exp = create(cluster, model / "distributed.yaml", model)
    assert cluster.det("experiment", "wait", str(exp)).returncode == 0
    (trial,) = describe(cluster, exp)["trials"]
    logs = cluster.det("experiment", "logs", str(exp)).stdout
    assert trial["state"] == "COMPLETED", logs[-3000:]
    # 100 batches, each adding both workers' increment_by (1 each)
    detail = json.loads(cluster.det("trial", "describe", str(trial["id"]), "--json").stdout)
    validations = [m for m in detail["metrics"] if m["group"] == "validation"]
    assert validations[-1]["metrics"]["x"] == 200 and validations[-1]["steps_completed"] == 100
    # one launcher, two wrapped workers, no heavy framework in them
    assert logs.count("[rank=0] heavy modules: []") == 1, logs[-3000:]
    assert logs.count("[rank=1] heavy modules: []") == 1, logs[-3000:]
