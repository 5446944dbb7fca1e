"""Issue 28's custom models on the cluster: the VAE (custom ``train_step``, no ``call()``
or config, x-only data) and the Distiller (its own ``compile``, ``train_step`` and
``test_step``), tests/scripts/custom_models.py as written, on 1 and 2 slots of a real
master. Slow (the master fixture)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.master import Cluster, run_to_the_end
from tests.support import SCRIPTS

# Stack-neutral: the custom models on the master; on both stacks locally and on 2
# processes: test_custom_models.py.
pytestmark = pytest.mark.stack_neutral

METRIC = {"vae": "val_total_loss", "distiller": "val_student_loss"}


@pytest.mark.parametrize("slots", [1, 2])
@pytest.mark.parametrize("which", ["vae", "distiller"])
def test_custom_model_completes_on_the_cluster(cluster: Cluster, tmp_path: Path,
                                               which: str, slots: int) -> None:
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    shutil.copy(SCRIPTS / "custom_models.py", model_dir / "custom_models.py")
    out = tmp_path / "out.json"
    # batch_size is each process's (as under horovodrun): 8 rows a step on any number
    # of slots (2 x 4 = 1 x 8)
    batch = str(8 // slots)
    config = cluster.write_config(
        f"{which}{slots}", entrypoint_script="python3 custom_models.py",
        resources={"slots_per_trial": slots}, hyperparameters={},
        searcher={"name": "single", "metric": METRIC[which], "max_length": {"epochs": 3}},
        environment={"environment_variables": [
            f"CUSTOM_MODEL={which}", f"CUSTOM_OUT={out}", f"CUSTOM_BATCH={batch}"]})
    _, info, trial, logs = run_to_the_end(cluster, config, model_dir, f"{which} trial")
    assert info["state"] == "COMPLETED", logs[-3000:]
    result = json.loads(out.read_text())
    assert result["size"] == slots and len(result["history"][METRIC[which]]) == 3
    with cluster.http() as http:
        rows = http.get(f"/api/v1/trials/{trial['id']}/metrics",
                        params={"group": "validation"}).json()
        assert [r["steps_completed"] for r in rows] == [6, 12, 18]  # 48 rows / 8 a step
        assert all(METRIC[which] in r["metrics"] for r in rows)
        ckpt = http.get(f"/api/v1/trials/{trial['id']}/checkpoints",
                        params={"latest": "true"}).json()
        assert ckpt[0]["steps_completed"] == 18
