"""Determined 0.38's PyTorch Trainer example in its shape (issue 38): tests/pytorch_trainer.

No `global_batch_size` anywhere: the script splits a constant global batch over the ranks
itself, as Determined's mnist_pytorch `train.py` does. It runs off the cluster as written
(`python train.py --batches N`, hyperparameters read from const.yaml by the script), and
on the master on 2 slots through the torch launcher, where a pause mid-epoch and an
activate end on the uninterrupted run's bits.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")

from det_sdk.env import outside  # noqa: E402
from harness.master import Cluster, create, describe, wait_until  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "tests" / "pytorch_trainer"


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("trainer") / "pytorch_trainer"
    shutil.copytree(EXAMPLE, d, ignore=shutil.ignore_patterns("__pycache__"))
    sys.path.insert(0, str(ROOT / "tests" / "pytorch_mnist"))
    try:
        import make_data
    finally:
        sys.path.pop(0)
    make_data.make(str(d / "digits.npz"), n_train=160, n_val=48)
    return d


def test_runs_off_the_cluster_without_global_batch_size(example: Path, tmp_path: Path) -> None:
    assert "global_batch_size" not in (example / "const.yaml").read_text()
    work = tmp_path / "local"
    shutil.copytree(example, work)
    out = subprocess.run([sys.executable, "train.py", "--batches", "12"], cwd=work,
                         capture_output=True, text=True, timeout=300,
                         env={**outside(), "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "global_batch_size" not in out.stderr, out.stderr[-3000:]
    (run,) = (work / "det-runs").iterdir()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    val = [r for r in rows if r.get("group") == "validation"]
    assert [r["steps_completed"] for r in val] == [10, 12], rows
    assert {"validation_loss", "accuracy"} <= set(val[-1]["metrics"])


def _config(path: Path, example: Path, **hp: object) -> Path:
    cfg = yaml.safe_load((example / "const.yaml").read_text())
    cfg["hyperparameters"].update(hp)
    cfg["resources"] = {"slots_per_trial": 2}
    cfg["checkpoint_storage"] = {"save_trial_latest": 100}
    path.write_text(yaml.safe_dump(cfg))
    return path


def _final_weights(cluster: Cluster, trial_id: int) -> tuple[int, dict]:
    out = cluster.det("checkpoint", "list", "--trial", str(trial_id), "--json")
    assert out.returncode == 0, out.stderr
    last = max(json.loads(out.stdout), key=lambda c: c["steps_completed"])
    state = torch.load(Path(last["path"]) / "state_dict.pth", weights_only=True)
    return last["steps_completed"], state["models_state_dict"][0]


def _completed(cluster: Cluster, exp: int) -> dict:
    out = cluster.det("experiment", "wait", str(exp), timeout=600)
    logs = cluster.det("experiment", "logs", str(exp)).stdout[-3000:]
    assert out.returncode == 0, logs
    (trial,) = describe(cluster, exp)["trials"]
    assert trial["state"] == "COMPLETED", logs
    return trial


def test_two_slots_pause_and_activate_is_bit_equal(cluster: Cluster, example: Path,
                                                   tmp_path: Path) -> None:
    full = _completed(cluster, create(cluster, _config(tmp_path / "full.yaml", example),
                                      example))
    started = tmp_path / "started"
    exp = create(cluster, _config(tmp_path / "paused.yaml", example, sleep=0.3,
                                  started=str(started)), example)
    wait_until("the trial to train 4 batches", started.exists, timeout=180)
    assert cluster.det("experiment", "pause", str(exp)).returncode == 0
    wait_until("PAUSED", lambda: describe(cluster, exp)["state"] == "PAUSED", timeout=120)
    (trial,) = describe(cluster, exp)["trials"]
    at, _ = _final_weights(cluster, trial["id"])
    assert 4 <= at < 20 and at != 10  # mid-epoch: 10 batches of 16 an epoch
    assert cluster.det("experiment", "activate", str(exp)).returncode == 0
    paused = _completed(cluster, exp)
    assert full["steps_completed"] == paused["steps_completed"] == 20
    (n1, a), (n2, b) = _final_weights(cluster, full["id"]), _final_weights(cluster, paused["id"])
    assert n1 == n2 == 20
    assert all(torch.equal(a[k], b[k]) for k in a)
