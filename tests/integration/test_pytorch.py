"""det_sdk.pytorch (issue 25): Determined's PyTorchTrial API on det.core, exact and the same on N.

Real torch on CPU: tiny models, an npz written here, real processes for the launcher,
SIGTERM and kill -9. Keras-2 venv: skipped (no torch there).

This module's other half, its end-to-end tests (real processes): tests/e2e/test_pytorch.py.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import det_sdk.pytorch as pytorch  # noqa: E402
from det_sdk.distributed import SingleProcess  # noqa: E402
from det_sdk.errors import DetSdkError  # noqa: E402
from det_sdk.pytorch._data import ShardedBatches  # noqa: E402


@pytest.mark.parametrize("size", [2, 4])
def test_ranks_batches_union_is_the_one_process_batch(size: int) -> None:
    one = list(ShardedBatches(103, 4 * size, shuffle=True, seed=5, epoch=3))
    ranks = [list(ShardedBatches(103, 4, rank=r, size=size, shuffle=True, seed=5, epoch=3))
             for r in range(size)]
    assert all(len(r) == len(one) for r in ranks)
    for k, batch in enumerate(one):
        assert [i for r in ranks for i in r[k]] == batch


def test_order_depends_on_seed_and_epoch_only_and_skip_resumes_mid_epoch() -> None:
    a = list(ShardedBatches(50, 5, shuffle=True, seed=1, epoch=0))
    np.random.seed(123)
    torch.manual_seed(9)  # the global RNGs do not matter
    assert list(ShardedBatches(50, 5, shuffle=True, seed=1, epoch=0)) == a
    assert list(ShardedBatches(50, 5, shuffle=True, seed=1, epoch=1)) != a
    assert list(ShardedBatches(50, 5, shuffle=True, seed=1, epoch=0, skip=3)) == a[3:]
    assert list(ShardedBatches(10, 3, shuffle=False)) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]


def test_dataloader_refuses_a_sampler() -> None:
    ds = torch.utils.data.TensorDataset(torch.zeros(4, 1))
    with pytest.raises(DetSdkError, match="sampler"):
        pytorch.DataLoader(ds, batch_size=2, sampler=[0, 1, 2, 3])
    with pytest.raises(ValueError, match="batch_size"):
        pytorch.DataLoader(ds, batch_size=0)


class _ThreeRanks(SingleProcess):
    """Only the size matters for the batch-size check (no collective is called)."""

    def __init__(self) -> None:
        super().__init__()
        self.size = 3


def test_global_batch_size_not_divisible_by_ranks_is_refused(tmp_path: Path) -> None:
    with pytorch.init(hparams={"global_batch_size": 8}, runs_dir=tmp_path,
                      distributed=_ThreeRanks()) as ctx:
        with pytest.raises(DetSdkError, match="global_batch_size 8 does not divide"):
            ctx.get_per_slot_batch_size()
        with pytest.raises(DetSdkError, match="no hyperparameter 'lr'"):
            ctx.get_hparam("lr")


class _Count(pytorch.MetricReducer):
    def reset(self) -> None:
        self.n = 0

    def update(self, k: int) -> None:
        self.n += k

    def per_slot_reduce(self) -> int:
        return self.n

    def cross_slot_reduce(self, per_slot: list[int]) -> int:
        return sum(per_slot)


class _Trial(pytorch.PyTorchTrial):
    """Determined 0.38's shape: the trial wraps and steps itself."""

    def __init__(self, context: pytorch.PyTorchTrialContext, data: dict) -> None:
        self.context = context
        self.data = data
        self.model = context.wrap_model(torch.nn.Sequential(
            torch.nn.Flatten(), torch.nn.Linear(64, 10)))
        self.opt = context.wrap_optimizer(torch.optim.Adam(self.model.parameters(), lr=0.01))
        context.wrap_lr_scheduler(torch.optim.lr_scheduler.StepLR(self.opt, step_size=1,
                                                                  gamma=0.9),
                                  step_mode=pytorch.LRScheduler.StepMode.STEP_EVERY_EPOCH)
        self.count = context.wrap_reducer(_Count(), name="val_samples")

    def _ds(self, split: str) -> torch.utils.data.TensorDataset:
        return torch.utils.data.TensorDataset(torch.from_numpy(self.data[f"x_{split}"]),
                                              torch.from_numpy(self.data[f"y_{split}"]))

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(self._ds("train"), shuffle=True,
                                  batch_size=self.context.get_per_slot_batch_size())

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(self._ds("val"), batch_size=50)  # 120 = 50 + 50 + 20

    def train_batch(self, batch: tuple, epoch_idx: int, batch_idx: int) -> dict:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch: tuple, batch_idx: int) -> dict:
        x, y = batch
        self.count.update(len(y))
        return {"val_loss": torch.nn.functional.cross_entropy(self.model(x), y)}


def test_trainer_trains_checkpoints_tensors_only_and_validates_per_sample(
        npz: Path, tmp_path: Path) -> None:
    with np.load(npz) as f:
        data = {k: f[k] for k in f.files}
    with pytorch.init(hparams={"global_batch_size": 40}, runs_dir=tmp_path, seed=3) as ctx:
        trial = _Trial(ctx, data)
        trainer = pytorch.Trainer(trial, ctx)
        trainer.fit(max_length=pytorch.Epoch(2))
        assert trainer.batches_trained == 20  # 400 / 40 per epoch
        assert trial.opt.param_groups[0]["lr"] == pytest.approx(0.01 * 0.9 ** 2)
        x = ctx.to_device(torch.from_numpy(data["x_val"]))  # where wrap_model put it
        y = ctx.to_device(torch.from_numpy(data["y_val"]))
        with torch.no_grad():
            want = torch.nn.functional.cross_entropy(trial.model(x), y).item()
    run = next(p for p in tmp_path.iterdir() if p.is_dir())
    val = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()
           if json.loads(line)["group"] == "validation"][-1]["metrics"]
    # per-sample over the whole validation set, not a mean of the 50/50/20 batch means
    assert val["val_loss"] == pytest.approx(want, rel=1e-6)
    assert val["val_samples"] == 120
    ckpt = [json.loads(line) for line in (run / "checkpoints.jsonl").read_text().splitlines()][-1]
    path = run / "checkpoints" / ckpt["uuid"]
    state = torch.load(path / "state_dict.pth", weights_only=True)
    assert {"models_state_dict", "optimizers_state_dict", "lr_schedulers_state_dict",
            "rng_state", "trainer_state"} <= set(state)
    # saved on the CPU (a checkpoint loads on a machine without the GPU it trained on)
    saved = state["models_state_dict"][0]["1.weight"]
    assert saved.device.type == "cpu" and torch.equal(saved, trial.model[1].weight.cpu())
    meta = json.loads((path / "metadata.json").read_text())
    assert meta["steps_completed"] == 20 and len(meta["checksums"]["state_dict.pth"]) == 64
    # a damaged checkpoint is refused by its checksum, not loaded
    raw = bytearray((path / "state_dict.pth").read_bytes())
    raw[-40] ^= 0xFF
    (path / "state_dict.pth").write_bytes(bytes(raw))
    with pytest.raises(DetSdkError, match="sha256"):
        pytorch.load_state(path)


class _EpochEdgesTrial(_Trial):
    """Records what the context says of each batch's place in its epoch."""

    def train_batch(self, batch: tuple, epoch_idx: int, batch_idx: int) -> dict:
        self.edges.append((batch_idx, self.context.is_epoch_start(), self.context.is_epoch_end()))
        return super().train_batch(batch, epoch_idx, batch_idx)


def test_context_says_which_batch_starts_and_ends_an_epoch(npz: Path, tmp_path: Path) -> None:
    with np.load(npz) as f:
        data = {k: f[k] for k in f.files}
    with pytorch.init(hparams={"global_batch_size": 40}, runs_dir=tmp_path, seed=3) as ctx:
        trial = _EpochEdgesTrial(ctx, data)
        trial.edges = []
        # before training: at an epoch's start, not its end
        assert (ctx.is_epoch_start(), ctx.is_epoch_end()) == (True, False)
        pytorch.Trainer(trial, ctx).fit(max_length=pytorch.Epoch(2))
    # 400 rows / 40 a batch: 10 batches an epoch (batch_idx: within the epoch)
    assert trial.edges == [(i % 10, i % 10 == 0, i % 10 == 9) for i in range(20)]


class _InterruptedTrial(_Trial):
    """Sends this process a Ctrl-C (SIGINT) during batch 3, as a user at the terminal."""

    def train_batch(self, batch: tuple, epoch_idx: int, batch_idx: int) -> dict:
        if batch_idx == 3:
            os.kill(os.getpid(), signal.SIGINT)
        return super().train_batch(batch, epoch_idx, batch_idx)


def test_ctrl_c_checkpoints_after_the_batch_and_stops_cleanly(npz: Path, tmp_path: Path) -> None:
    # det_sdk.engine.signals: the stop request every front shares (Keras's fit too)
    with np.load(npz) as f:
        data = {k: f[k] for k in f.files}
    before = signal.getsignal(signal.SIGINT)
    with pytorch.init(hparams={"global_batch_size": 40}, runs_dir=tmp_path) as ctx:
        trainer = pytorch.Trainer(_InterruptedTrial(ctx, data), ctx)
        trainer.fit(max_length=pytorch.Epoch(2))  # no KeyboardInterrupt
        assert trainer.batches_trained == 4
    assert signal.getsignal(signal.SIGINT) is before  # the handler is the caller's again
    run = next(p for p in tmp_path.iterdir() if p.is_dir())
    rows = [json.loads(line) for line in (run / "checkpoints.jsonl").read_text().splitlines()]
    assert [r["steps_completed"] for r in rows] == [4]


def test_fit_refuses_bad_lengths(npz: Path, tmp_path: Path) -> None:
    with np.load(npz) as f:
        data = {k: f[k] for k in f.files}
    with pytorch.init(hparams={"global_batch_size": 40}, runs_dir=tmp_path) as ctx:
        trainer = pytorch.Trainer(_Trial(ctx, data), ctx)
        with pytest.raises(DetSdkError, match="max_length must be"):
            trainer.fit(max_length=10)  # type: ignore[arg-type]
        with pytest.raises(DetSdkError, match="max_length is required"):
            trainer.fit()


@pytest.mark.parametrize("local_only", [True, False])
def test_under_horovodrun_rank_0_publishes_a_store_already_listening(local_only: bool) -> None:
    """Rank 0's group store is bound before its address reaches horovodrun's key-value store:
    a port found free and bound later was once taken in between by another trial on the host
    (that trial failed at start, "Address already in use"). Ranks on several hosts
    (``local_only=False``: Slurm over nodes) too: rank 0 once could not reach its own store
    there."""
    import http.server
    import socket
    import threading

    from det_sdk.collectives.torch import _rendezvous_via_horovod

    kv: dict[str, bytes] = {}
    reachable: list[bool] = []

    class Rendezvous(http.server.BaseHTTPRequestHandler):  # horovodrun's, as plain HTTP
        def do_PUT(self) -> None:
            value = self.rfile.read(int(self.headers["Content-Length"]))
            host, _, port = value.decode().rpartition(":")
            with socket.socket() as probe:  # at publication, someone can already connect
                reachable.append(probe.connect_ex((host, int(port))) == 0)
            kv[self.path] = value
            self.send_response(200)
            self.end_headers()

        def do_GET(self) -> None:
            if self.path not in kv:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(kv[self.path])))
            self.end_headers()
            self.wfile.write(kv[self.path])

        def log_message(self, *args: object) -> None:
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Rendezvous) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        env = {"HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1",
               "HOROVOD_GLOO_RENDEZVOUS_PORT": str(server.server_address[1])}
        host, port, store = _rendezvous_via_horovod(env, 0, 2, local_only, timeout=10)
        assert reachable == [True] and store is not None and port == store.port
        store.set("k", "v")  # rank 1 reads the address and connects to rank 0's store
        assert _rendezvous_via_horovod(env, 1, 2, local_only, timeout=10)[:2] == (host, port)
        assert _rendezvous_via_horovod(env, 1, 2, local_only, timeout=10)[2].get("k") == b"v"
        server.shutdown()


def test_each_rank_trains_on_a_gpu_of_its_own_or_is_refused_naming_what_to_change(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The device rule, GPUs given as a count (this machine has none; the device machine
    ran the CUDA path itself: docs/pytorch.md)."""
    from det_sdk.collectives.torch import DistributedSetupError, rank_device

    assert str(rank_device(0, 1, gpus=0)) == "cpu"
    assert str(rank_device(3, 4, gpus=8)) == "cuda:3"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(DistributedSetupError, match=r"2 processes on this machine, but it "
                       r"shows 1 GPU \(CUDA_VISIBLE_DEVICES='0'\).*local rank 1 has none.*"
                       r"at most 1 per machine") as err:
        rank_device(1, 2, gpus=1)
    assert isinstance(err.value, DetSdkError)
