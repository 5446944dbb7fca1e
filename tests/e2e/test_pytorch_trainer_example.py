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
from harness.master import Cluster, create, describe, trial_logs, wait_until  # noqa: E402

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
    (trial,) = describe(cluster, exp)["trials"]
    if out.returncode != 0 or trial["state"] != "COMPLETED":  # the logs say why
        raise AssertionError(cluster.det("experiment", "logs", str(exp)).stdout[-3000:])
    return trial


def test_two_slots_pause_and_activate_is_bit_equal(cluster: Cluster, example: Path,
                                                   tmp_path: Path) -> None:
    full = _completed(cluster, create(cluster, _config(tmp_path / "full.yaml", example),
                                      example))
    started, release = tmp_path / "started", tmp_path / "release"
    exp = create(cluster, _config(tmp_path / "paused.yaml", example, sleep=0.3,
                                  started=str(started), release=str(release)), example)
    # the 4th batch is held until the trial has heard the pause: a stop mid-epoch whatever
    # the load (at load ~30 the pause once took the 6 batches left in the epoch to arrive)
    wait_until("the trial to train 4 batches", started.exists, timeout=180)
    assert cluster.det("experiment", "pause", str(exp)).returncode == 0
    (trial,) = describe(cluster, exp)["trials"]
    wait_until("the trial to hear the pause",
               lambda: "asks this trial to stop" in trial_logs(cluster, trial["id"]),
               timeout=120)
    release.touch()
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


SHIM_CHECK = '''
import det_sdk.pytorch
import determined.core
from determined.experimental import client
from determined.pytorch import DataLoader, samplers
import determined.pytorch.samplers as samplers_again
from determined import keras  # noqa: F401  (resolved lazily: no TensorFlow yet)

assert DataLoader is det_sdk.pytorch.DataLoader and samplers is samplers_again
assert callable(determined.core.init) and callable(client.get_experiment)
try:
    import determined.common.api  # noqa: F401
except ImportError as err:
    assert "docs/determined-compat.md" in str(err), err
    print("SHIM-OK", type(err).__name__)
'''


def test_determined_names_import_in_a_trial_and_the_example_runs_unrenamed(
        cluster: Cluster, example: Path, tmp_path: Path) -> None:
    """The master's `determined` shim: Determined's module paths, and the example with its
    imports left as Determined's (`import determined as det`, `from determined import
    pytorch`)."""
    ctx = tmp_path / "ctx"
    shutil.copytree(example, ctx)
    script = (example / "train.py").read_text()
    unrenamed = script.replace("import det_sdk as det", "import determined as det").replace(
        "from det_sdk import pytorch", "from determined import pytorch")
    assert unrenamed != script and "det_sdk" not in unrenamed.split('"""', 2)[2]
    (ctx / "train.py").write_text(unrenamed)
    (ctx / "shim_check.py").write_text(SHIM_CHECK)
    cfg = yaml.safe_load((example / "const.yaml").read_text())
    cfg["entrypoint"] = "python3 shim_check.py && python3 train.py --batches 4"
    (tmp_path / "shim.yaml").write_text(yaml.safe_dump(cfg))
    exp = create(cluster, tmp_path / "shim.yaml", ctx)
    trial = _completed(cluster, exp)
    logs = cluster.det("trial", "logs", str(trial["id"])).stdout
    assert "SHIM-OK NotInDetSdk" in logs, logs[-3000:]
    assert trial["steps_completed"] == 4


FRESH_PROCESS = '''
import json, sys, time
import torch
from det_sdk.experimental import client
from det_sdk import pytorch
from train import Digits

client.login(master=sys.argv[1])  # DET_MASTER is set too: login(master=) wins
created = client.create_experiment(sys.argv[2], ".")
assert created.wait(interval=0.2).value == "COMPLETED"
exp = client.get_experiment(created.id)
assert created.id in [e.id for e in client.list_experiments()]
trials = exp.list_trials()
val = {t.id: [m.metrics["validation_loss"]
              for m in client.iter_trials_metrics([t.id], group="validation")] for t in trials}
best = exp.top_checkpoint()
assert best.uuid == exp.list_checkpoints(max_results=1)[0].uuid
model = client.create_model("digits", description="the best of a grid")
version = model.register_version(best.uuid)
again = client.get_model("digits").get_version(1)
path = again.checkpoint.download(sys.argv[3])
trial = client.get_trial(best.trial_id)
loaded = pytorch.load_trial_from_checkpoint_path(path, trial_class=Digits,
                                                 trial_kwargs={"hparams": trial.hparams})
state = torch.load(path + "/state_dict.pth", weights_only=True)["models_state_dict"][0]
same = all(torch.equal(loaded.model.state_dict()[k], v) for k, v in state.items())
# pause, activate and kill an experiment the client created
other = client.create_experiment(sys.argv[2], ".")
other.pause()
while other.state.value != "PAUSED":
    time.sleep(0.2)
    other.reload()
other.activate()
other.kill()
assert other.wait(interval=0.2).value == "CANCELED"
print(json.dumps({"version": version.model_version, "uuid": again.checkpoint_uuid,
                  "best_uuid": best.uuid, "best_trial": best.trial_id, "val": val,
                  "same": same, "steps": best.metadata["steps_completed"],
                  "versions": [v.model_version for v in model.get_versions()]}))
'''


def test_client_finds_the_best_checkpoint_registers_downloads_and_loads_it(
        cluster: Cluster, example: Path, tmp_path: Path) -> None:
    """From a fresh process, Determined's Python SDK creates a grid of 2 on the master,
    waits, finds the best checkpoint, registers it as version 1, downloads and loads it;
    then pauses, activates and kills another experiment."""
    cfg = yaml.safe_load((example / "const.yaml").read_text())
    cfg["hyperparameters"]["learning_rate"] = {"type": "categorical", "vals": [0.001, 1.0]}
    cfg["searcher"] = {"name": "grid", "metric": "validation_loss", "smaller_is_better": True}
    cfg["entrypoint"] = "python3 train.py --batches 10"
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(cfg))
    (example / "fresh.py").write_text(FRESH_PROCESS)
    out = subprocess.run([sys.executable, "fresh.py", cluster.url, str(tmp_path / "grid.yaml"),
                          str(tmp_path / "dl")], cwd=example, env={
                              **cluster.env, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["version"] == 1 and got["versions"] == [1] and got["same"]
    assert got["uuid"] == got["best_uuid"] and got["steps"] == 10
    final = {int(t): v[-1] for t, v in got["val"].items()}
    assert len(final) == 2 and got["best_trial"] == min(final, key=final.get)
    listed = cluster.det("model", "describe", "digits", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [v["checkpoint_uuid"] for v in json.loads(listed.stdout)["versions"]] == \
        [got["best_uuid"]]
    assert "digits" in cluster.det("model", "list").stdout
