"""Retention keeps what the model registry points at (issue 38): a trial's checkpoint
registered as a model version is never deleted by ``save_trial_latest``/``best``.

A real ``Master`` on a real SQLite file, in this process (no trial is launched).
"""

from __future__ import annotations

import base64
import uuid as uuidlib
from pathlib import Path

import pytest

from det_sdk.master.archive import pack
from det_sdk.master.core import Master
from det_sdk.master.models import ModelRegistry, registered_checkpoints

# Stack-neutral: this module tests the master, the CLI or the UI; Keras is at most the workload.
pytestmark = pytest.mark.stack_neutral


def test_a_registered_checkpoint_outlives_the_retention_policy(tmp_path: Path) -> None:
    master = Master(tmp_path / "m", slots=1, url="http://127.0.0.1:1")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "train.py").write_text("print('hi')\n")
    config = {"entrypoint": "python3 train.py",
              "searcher": {"name": "single", "metric": "val_loss", "max_length": {"epochs": 3}},
              "checkpoint_storage": {"save_trial_latest": 1, "save_trial_best": 0}}
    exp = master.create_experiment(config, base64.b64encode(pack(tmp_path / "model")).decode())
    trial = master.store.trials(exp)[0]["id"]
    master.store.update_trial(trial, state="RUNNING")  # as if launched: it reports
    assert registered_checkpoints(master.store) == set()  # before any model exists

    uuids = [str(uuidlib.uuid4()) for _ in range(3)]

    def report(i: int) -> None:
        master.report_checkpoint({"trial_id": trial, "uuid": uuids[i], "steps_completed": i,
                                  "epoch": i, "metrics": {"val_loss": 1.0 / (i + 1)}})

    report(0)
    registry = ModelRegistry(master.store)
    registry.create("kept")
    registry.register("kept", uuids[0])
    report(1)
    report(2)
    left = {c["uuid"] for c in master.store.checkpoints(trial)}
    assert left == {uuids[0], uuids[2]}  # the latest, and the registered one
