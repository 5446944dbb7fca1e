"""What `det e delete` / `det c delete` / `det e archive` refuse (issue 48): a real
``Master`` on a real SQLite file, in this process (no trial is launched). The effects on a
running master, through the real CLI: tests/e2e/test_cli_determined.py.
"""

from __future__ import annotations

import base64
import uuid as uuidlib
from pathlib import Path

import pytest

from det_sdk.master.archive import pack
from det_sdk.master.core import Master
from det_sdk.master.errors import Conflict, NotFound
from det_sdk.master.experiment_admin import ExperimentAdmin
from det_sdk.master.models import ModelRegistry

pytestmark = pytest.mark.stack_neutral


def test_a_model_versions_checkpoint_blocks_deletion_and_archiving_waits_for_the_end(
        tmp_path: Path) -> None:
    master = Master(tmp_path / "m", slots=1, url="http://127.0.0.1:1")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "train.py").write_text("print('hi')\n")
    config = {"entrypoint": "python3 train.py",
              "searcher": {"name": "single", "metric": "val_loss", "max_length": 1}}
    exp = master.create_experiment(config, base64.b64encode(pack(tmp_path / "model")).decode())
    admin = ExperimentAdmin(master)
    trial = master.store.trials(exp)[0]["id"]
    with pytest.raises(Conflict, match="only an ended experiment"):
        admin.archive(exp, True)
    with pytest.raises(Conflict, match="has ended"):
        admin.delete_experiment(exp)
    master.store.update_trial(trial, state="RUNNING")  # as if launched: it reports
    kept = str(uuidlib.uuid4())
    master.report_checkpoint({"trial_id": trial, "uuid": kept, "steps_completed": 1,
                              "epoch": 1, "metrics": {}})
    ModelRegistry(master.store).create("m")
    ModelRegistry(master.store).register("m", kept)
    master.store.update_trial(trial, state="CANCELED")  # as if it had ended
    master.store.set_experiment_state(exp, "CANCELED")
    with pytest.raises(Conflict, match="versions of models"):
        admin.delete_experiment(exp)
    with pytest.raises(Conflict, match="versions of models"):
        admin.delete_checkpoints([kept])
    with pytest.raises(NotFound):
        admin.delete_checkpoints([kept, str(uuidlib.uuid4())])  # all or none
    assert master.store.checkpoint(kept) is not None and master.store.experiment(exp)
    admin.archive(exp, True)
    assert master.store.experiment_page(None, 10, archived=False)[1] == 0
    assert master.store.experiment_page(None, 10, archived=True)[1] == 1
