"""The seed's PyTorchTrial tutorial (tests/pytorch_mnist) on the embedded master (issue 25).

`entrypoint: model_def:MNistTrial` runs through det_sdk.launch.trial; 2 slots start the
ranks under `horovodrun --gloo` and det_sdk.pytorch builds its torch.distributed group
from Horovod's variables. One master for the module (the `cluster` fixture, here with the
GCS emulator's address in its environment: the 2-slot pause runs with its checkpoints on
the master's disk, in GCS (fake-gcs-server) and in Azure (Azurite), servers this module
starts).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

torch = pytest.importorskip("torch")

from harness.master import (  # noqa: E402
    Cluster,
    api,
    create,
    describe,
    running_cluster,
    wait_until,
)
from tests.object_servers import installed, started  # noqa: E402

BUCKET = "det-sdk-pt-cluster"

MNIST = Path(__file__).parents[1] / "pytorch_mnist"

SLOW_TRIAL = '''
import os, time
from pathlib import Path
from model_def import MNistTrial


class SlowMNistTrial(MNistTrial):
    """The tutorial's trial, slowed down so that a test can pause it mid-epoch."""

    def train_batch(self, batch, model, epoch_idx, batch_idx):
        out = super().train_batch(batch, model, epoch_idx, batch_idx)
        data = self.context.get_data_config()
        time.sleep(data.get("sleep_per_batch", 0))
        self.seen = getattr(self, "seen", 0) + 1
        if self.seen >= 3 and data.get("started"):
            Path(data["started"]).touch()
        return out
'''


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pt_model") / "mnist"
    shutil.copytree(MNIST, d)
    (d / "slow.py").write_text(SLOW_TRIAL)
    import sys

    sys.path.insert(0, str(d))
    try:
        import make_data
    finally:
        sys.path.remove(str(d))
    make_data.make(str(d.parent / "mnist8.npz"))
    return d


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, Any]]]:
    """The object stores a paused trial may keep its checkpoints in, by name: each one's
    ``checkpoint_storage`` (none where its server is not installed); "env": what the
    master's environment needs for them."""
    with contextlib.ExitStack() as stack:
        found: dict[str, dict[str, Any]] = {"env": {}}
        if installed("gcs"):
            gcs = stack.enter_context(started("gcs", tmp_path_factory, BUCKET))
            found["gcs"] = {"type": "gcs", "bucket": BUCKET, "prefix": "paused"}
            # Google's client has no config field for an emulator: the environment's
            found["env"]["STORAGE_EMULATOR_HOST"] = gcs.url
        if installed("azure"):
            az = stack.enter_context(started("azure", tmp_path_factory, BUCKET))
            found["azure"] = {"type": "azure", "container": BUCKET, "prefix": "paused",
                              "connection_string": az.connection_string}
        yield found


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory,
            stores: dict[str, dict[str, Any]]) -> Iterator[Cluster]:
    """This module's master, with the stores' environment (its trials inherit it)."""
    with running_cluster(tmp_path_factory.mktemp("cluster"), env=stores["env"]) as c:
        yield c


def _config(path: Path, model_dir: Path, **overrides: Any) -> Path:
    cfg = yaml.safe_load((model_dir / "const.yaml").read_text())
    cfg.update({"data": {"npz": str(model_dir.parent / "mnist8.npz")},
                "checkpoint_storage": {"save_trial_latest": 100}, "max_restarts": 1})
    hp = overrides.pop("hyperparameters", {})
    cfg["hyperparameters"].update(hp)
    data = overrides.pop("data", {})
    cfg["data"].update(data)
    cfg.update(overrides)
    path.write_text(yaml.safe_dump(cfg))
    return path


def _checkpoints(cluster: Cluster, trial_id: int) -> list[dict]:
    """The trial's checkpoints, as `det checkpoint list --trial` lists them, read in this
    process (a `det` costs ~0.3 s of CPU; the CLI's listing: test_cluster.py)."""
    r = api(cluster).get(f"/api/v1/trials/{trial_id}/checkpoints")
    assert r.status_code == 200, r.text
    return sorted(r.json(), key=lambda c: c["steps_completed"])


def _final_weights(cluster: Cluster, trial_id: int) -> dict:
    """The last checkpoint's model, read through `det checkpoint download` (verified
    against the manifest where it is in a bucket)."""
    last = _checkpoints(cluster, trial_id)[-1]
    where = cluster.root / "downloads" / last["uuid"]
    out = cluster.det("checkpoint", "download", last["uuid"], "-o", str(where), "-q")
    assert out.returncode == 0, out.stderr
    state = torch.load(where / "state_dict.pth", weights_only=True)
    return state["models_state_dict"][0]


def _validations(cluster: Cluster, trial_id: int) -> list[tuple[int, float]]:
    """The trial's validations, as `det trial describe --json` shows them, read in this
    process (the CLI's and the API's metrics agree: test_cluster.py)."""
    r = api(cluster).get(f"/api/v1/trials/{trial_id}/metrics", params={"group": "validation"})
    assert r.status_code == 200, r.text
    return [(m["steps_completed"], m["metrics"]["validation_error"]) for m in r.json()]


def _completed(cluster: Cluster, exp: int) -> dict:
    assert cluster.det("experiment", "wait", str(exp)).returncode == 0, \
        cluster.det("experiment", "logs", str(exp)).stdout[-3000:]
    (trial,) = describe(cluster, exp)["trials"]
    assert trial["state"] == "COMPLETED", cluster.det("experiment", "logs", str(exp)).stdout[-3000:]
    return trial


def test_tutorial_completes_on_one_and_two_slots(cluster: Cluster, model_dir: Path,
                                                tmp_path: Path) -> None:
    """Dropout 0: both report validation_error and checkpoints; 2 slots within 0.005."""
    exps = [create(cluster, _config(tmp_path / f"s{n}.yaml", model_dir,
                                    hyperparameters={"dropout": 0.0},
                                    resources={"slots_per_trial": n}), model_dir)
            for n in (1, 2)]
    one, two = (_completed(cluster, e) for e in exps)
    assert one["steps_completed"] == two["steps_completed"] == 40
    v1, v2 = _validations(cluster, one["id"]), _validations(cluster, two["id"])
    assert [s for s, _ in v1] == [s for s, _ in v2] == [20, 40]
    assert all(abs(a - b) <= 0.005 for (_, a), (_, b) in zip(v1, v2))
    assert [c["steps_completed"] for c in _checkpoints(cluster, one["id"])][-1] == 40
    w1, w2 = _final_weights(cluster, one["id"]), _final_weights(cluster, two["id"])
    assert max((w1[k] - w2[k]).abs().max().item() for k in w1) < 1e-5


@pytest.fixture(scope="module")
def uninterrupted(cluster: Cluster, model_dir: Path,
                  tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The 2-slot trial the paused ones must equal, run once (checkpoints on the master's
    disk)."""
    path = tmp_path_factory.mktemp("full") / "full.yaml"
    full = create(cluster, _config(path, model_dir, resources={"slots_per_trial": 2},
                                   entrypoint="slow:SlowMNistTrial"), model_dir)
    return _completed(cluster, full)


@pytest.mark.parametrize("where", ["disk", "gcs", "azure"])
def test_pause_mid_epoch_and_activate_is_bit_equal(
        cluster: Cluster, model_dir: Path, tmp_path: Path, uninterrupted: dict,
        stores: dict[str, dict[str, Any]], where: str) -> None:
    """shuffle=True and dropout 0.3, 2 slots: paused mid-epoch, activated: the uninterrupted
    bits, with the checkpoints on the master's disk, in GCS or in Azure (every checkpoint
    the master lists is at its bucket's URL). (One process stopped mid-epoch and resumed:
    test_pytorch.py's SIGTERM test; the pause reaches one slot's trial as it reaches two.)"""
    storage: dict[str, Any] = {"save_trial_latest": 100}
    if where != "disk":
        if where not in stores:
            pytest.skip(f"no {where} emulator installed (scripts/setup.sh installs them)")
        storage.update(stores[where])
    started = tmp_path / "started"
    paused = create(cluster, _config(tmp_path / "paused.yaml", model_dir,
                                     resources={"slots_per_trial": 2},
                                     entrypoint="slow:SlowMNistTrial",
                                     checkpoint_storage=storage,
                                     data={"sleep_per_batch": 0.3, "started": str(started)}),
                    model_dir)
    wait_until("the trial to train 3 batches", started.exists, timeout=180)
    assert cluster.det("experiment", "pause", str(paused)).returncode == 0
    wait_until("PAUSED", lambda: describe(cluster, paused)["state"] == "PAUSED", timeout=120)
    (t_paused,) = describe(cluster, paused)["trials"]
    at = _checkpoints(cluster, t_paused["id"])[-1]["steps_completed"]
    assert 3 <= at < 40 and at % 25 != 0  # mid-epoch (25 batches an epoch)
    assert cluster.det("experiment", "activate", str(paused)).returncode == 0
    t_paused = _completed(cluster, paused)
    assert t_paused["restarts"] == 0
    if where != "disk":
        scheme = {"gcs": "gs", "azure": "az"}[where]
        paths = [c["path"] for c in _checkpoints(cluster, t_paused["id"])]
        assert paths and all(p.startswith(f"{scheme}://{BUCKET}/paused/") for p in paths), paths
    a = _final_weights(cluster, uninterrupted["id"])
    b = _final_weights(cluster, t_paused["id"])
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert _validations(cluster, uninterrupted["id"]) == _validations(cluster, t_paused["id"])


KILL_SCRIPT = '''
import logging, os, time
from pathlib import Path

import det_sdk as det
from det_sdk import pytorch
from train import MNistTrial


class Slow(MNistTrial):
    def train_batch(self, batch, epoch_idx, batch_idx):
        out = super().train_batch(batch, epoch_idx, batch_idx)
        time.sleep(self.hparams["sleep"])
        d = Path(self.hparams["pid_dir"])
        (d / f"rank{self.context.distributed.rank}.pid").write_text(str(os.getpid()))
        return out


logging.basicConfig(level=logging.INFO)
info = det.get_cluster_info()
with pytorch.init() as ctx:
    trial = Slow(ctx, hparams=info.trial.hparams)
    pytorch.Trainer(trial, ctx).fit(max_length=pytorch.Epoch(2), checkpoint_period=pytorch.Batch(4),
                                    latest_checkpoint=info.latest_checkpoint)
'''


def _trainer_api_config(path: Path, model_dir: Path, entrypoint: str, key: str = "entrypoint",
                        **hp: Any) -> Path:
    cfg = {"name": path.stem, key: entrypoint, "max_restarts": 1,
           "resources": {"slots_per_trial": 2},
           "hyperparameters": {"learning_rate": 1.0, "dropout": 0.25, "global_batch_size": 32,
                               "npz": str(model_dir.parent / "mnist8.npz"), **hp},
           "searcher": {"name": "single", "metric": "validation_loss",
                        "max_length": {"epochs": 2}},
           "checkpoint_storage": {"save_trial_latest": 100}}
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_trainer_api_train_py_on_two_slots_through_the_launcher(
        cluster: Cluster, model_dir: Path, tmp_path: Path) -> None:
    """Determined's mnist_pytorch train.py, imports renamed, through the torch launcher."""
    cfg = _trainer_api_config(tmp_path / "trainer.yaml", model_dir,
                              "python3 -m det_sdk.launch.torch_distributed -- python3 train.py")
    trial = _completed(cluster, create(cluster, cfg, model_dir))
    assert trial["steps_completed"] == 26  # 13 batches of 32 an epoch (the last one short)
    detail = json.loads(cluster.det("trial", "describe", str(trial["id"]), "--json").stdout)
    val = [m for m in detail["metrics"] if m["group"] == "validation"]
    assert val and {"validation_loss", "accuracy"} <= set(val[-1]["metrics"])
    assert _checkpoints(cluster, trial["id"])[-1]["steps_completed"] == 26


def test_kill_9_of_one_rank_restarts_the_trial_from_its_checkpoint(
        cluster: Cluster, model_dir: Path, tmp_path: Path) -> None:
    (model_dir / "kill_train.py").write_text(KILL_SCRIPT)
    pids = tmp_path / "pids"
    pids.mkdir()
    # entrypoint_script: one process per slot under horovodrun, no launcher of ours to
    # stop the survivor: it must notice the dead rank itself (a failed collective)
    cfg = _trainer_api_config(tmp_path / "kill.yaml", model_dir, "python3 kill_train.py",
                              key="entrypoint_script", sleep=0.2, pid_dir=str(pids))
    exp = create(cluster, cfg, model_dir)

    def trained_past_a_checkpoint() -> bool:
        # read in this process: a `det checkpoint list` per poll costs ~0.2 s of CPU
        (t,) = describe(cluster, exp)["trials"] or [None]
        if not (t and (pids / "rank1.pid").exists()):
            return False
        with cluster.http() as http:
            return bool(http.get(f"/api/v1/trials/{t['id']}/checkpoints").json())

    wait_until("a checkpoint and both ranks training", trained_past_a_checkpoint, timeout=180)
    victim = int((pids / "rank1.pid").read_text())
    survivor = int((pids / "rank0.pid").read_text())
    os.kill(victim, signal.SIGKILL)
    t0 = time.monotonic()

    def gone(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # a zombie of an exited rank counts as gone
        stat = Path(f"/proc/{pid}/stat")
        return not stat.exists() or stat.read_text().split()[2] == "Z"

    wait_until("the surviving rank to exit", lambda: gone(survivor), timeout=60)
    assert time.monotonic() - t0 < 60
    trial = _completed(cluster, exp)
    assert trial["restarts"] == 1 and trial["steps_completed"] == 26
    logs = cluster.det("experiment", "logs", str(exp)).stdout
    assert "resumed from" in logs and "at batch 0" not in logs, logs[-3000:]
