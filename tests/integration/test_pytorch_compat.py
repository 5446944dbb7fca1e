"""Determined 0.38's `determined.pytorch` names a script imports (issue 38): `samplers`,
`TorchData`, `load_trial_from_checkpoint_path` / `CheckpointLoadContext`; and a Trainer
whose trial declares no `global_batch_size`. In-process, real torch on CPU."""

from __future__ import annotations

import itertools
import typing
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import det_sdk.pytorch as pytorch  # noqa: E402
from det_sdk.errors import DetSdkError  # noqa: E402
from det_sdk.pytorch import samplers  # noqa: E402


def test_sampler_chain_shuffle_skip_shard_repeat_covers_each_batch_once_per_rank() -> None:
    base = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(range(20)), 3,
                                         drop_last=False)
    shuffled = list(samplers.ReproducibleShuffleBatchSampler(base, seed=4))
    assert shuffled == list(samplers.ReproducibleShuffleBatchSampler(base, seed=4))
    assert sorted(shuffled) == list(base) and shuffled != list(base)
    ranks = [list(samplers.DistributedBatchSampler(shuffled, num_workers=3, rank=r))
             for r in range(3)]
    assert [len(samplers.DistributedBatchSampler(shuffled, 3, r)) for r in range(3)] == \
        [len(r) for r in ranks] == [3, 2, 2]
    assert sorted(b for r in ranks for b in r) == sorted(shuffled)
    skipped = samplers.SkipBatchSampler(shuffled, skip=5)
    assert list(skipped) == shuffled[5:] and len(skipped) == 7
    rep = samplers.RepeatBatchSampler(skipped)
    assert list(itertools.islice(rep, 4)) == shuffled[5:7] + shuffled[5:7]
    idx = samplers.DistributedSampler(range(7), num_workers=2, rank=0)
    assert list(idx) == [0, 2, 4, 6] and len(idx) == 4
    with pytest.raises(DetSdkError, match="rank"):
        samplers.DistributedBatchSampler(base, num_workers=2, rank=2)


def test_torchdata_is_determined_union_of_tensor_shapes() -> None:
    args = typing.get_args(pytorch.TorchData)
    assert len(args) == 3  # a dict of tensors, a sequence of them, one tensor


class Tiny(pytorch.PyTorchTrial):
    """Determined 0.38's Trainer shape: the script sizes its loader, no global_batch_size."""

    def __init__(self, context: pytorch.PyTorchTrialContext, scale: float = 1.0) -> None:
        self.context = context
        self.model = context.wrap_model(torch.nn.Linear(3, 2))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(),
                                                          lr=context.get_hparam("lr") * scale))
        gen = torch.Generator().manual_seed(0)
        self.ds = torch.utils.data.TensorDataset(torch.randn(24, 3, generator=gen),
                                                 torch.randint(0, 2, (24,), generator=gen))

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(self.ds, batch_size=8 // self.context.distributed.get_size())

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(self.ds, batch_size=8)

    def train_batch(self, batch: pytorch.TorchData, epoch_idx: int, batch_idx: int) -> dict:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch: pytorch.TorchData, batch_idx: int) -> dict:
        x, y = batch
        return {"val_loss": torch.nn.functional.cross_entropy(self.model(x), y).item()}


def test_trainer_without_global_batch_size_and_load_trial_from_its_checkpoint(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with pytorch.init(hparams={"lr": 0.5}, runs_dir=tmp_path) as ctx:
        trial = Tiny(ctx)
        pytorch.Trainer(trial, ctx).fit(max_length=pytorch.Batch(6))
        trained = {k: v.clone() for k, v in trial.model.state_dict().items()}
    assert "global_batch_size" not in caplog.text
    (ckpt,) = (p for p in tmp_path.rglob("state_dict.pth"))
    # the class the checkpoint names (importable), its hyperparameters, the kwargs given
    loaded = pytorch.load_trial_from_checkpoint_path(ckpt.parent, trial_kwargs={"scale": 2.0})
    assert type(loaded).__name__ == "Tiny" and loaded.context.get_hparam("lr") == 0.5
    assert loaded.opt.param_groups[0]["lr"] == 1.0
    assert all(torch.equal(loaded.model.state_dict()[k], v) for k, v in trained.items())
    assert pytorch.CheckpointLoadContext(hparams={"lr": 1}).distributed.get_size() == 1
    with pytest.raises(DetSdkError, match=r"state_dict\.pth"):
        pytorch.load_trial_from_checkpoint_path(tmp_path)
