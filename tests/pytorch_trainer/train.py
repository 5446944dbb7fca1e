"""A Trainer-API script in the shape of Determined 0.38's mnist_pytorch `train.py` (issue 38).

What it exercises, as Determined's example does: no `global_batch_size` hyperparameter
(the script sizes its loaders: a constant global batch split over the ranks),
`pytorch.TorchData` annotations, `pytorch.init()` with no arguments, hyperparameters read
from `const.yaml` by the script itself off the cluster and from `det.get_cluster_info()`
on it, `latest_checkpoint` passed to `fit` for pause/activate, `validation_period`.

    python train.py --batches 30                       # locally
    entrypoint: python3 -m det_sdk.launch.torch_distributed -- python3 train.py --epochs 2
"""

import argparse
import logging
import pathlib
import time
from typing import Any

import numpy as np
import torch
import yaml
from torch import nn

import det_sdk as det
from det_sdk import pytorch

GLOBAL_BATCH = 16


class Digits(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext, hparams: dict) -> None:
        self.context = context
        self.hparams = hparams
        self.per_slot = GLOBAL_BATCH // context.distributed.get_size()
        with np.load(hparams["npz"]) as f:
            self.arrays = {k: f[k] for k in f.files}
        self.model = context.wrap_model(nn.Sequential(
            nn.Flatten(), nn.Linear(64, hparams["hidden"]), nn.ReLU(),
            nn.Dropout(hparams["dropout"]), nn.Linear(hparams["hidden"], 10), nn.LogSoftmax(1)))
        self.opt = context.wrap_optimizer(
            torch.optim.Adadelta(self.model.parameters(), lr=hparams["learning_rate"]))
        self.loss_fn = nn.NLLLoss()

    def _loader(self, split: str, shuffle: bool) -> pytorch.DataLoader:
        ds = torch.utils.data.TensorDataset(torch.from_numpy(self.arrays[f"x_{split}"]),
                                            torch.from_numpy(self.arrays[f"y_{split}"]))
        return pytorch.DataLoader(ds, batch_size=self.per_slot, shuffle=shuffle)

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return self._loader("train", shuffle=True)

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return self._loader("val", shuffle=False)

    def train_batch(self, batch: pytorch.TorchData, epoch_idx: int,
                    batch_idx: int) -> dict[str, torch.Tensor]:
        x, y = batch
        loss = self.loss_fn(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        # a test pauses the trial mid-epoch: it slows the batches, waits for the "started"
        # file, and (with "release") holds the 4th batch until it has paused the trial
        time.sleep(self.hparams.get("sleep", 0))
        if batch_idx >= 3 and self.hparams.get("started"):
            pathlib.Path(self.hparams["started"]).touch()
        if batch_idx == 3 and self.hparams.get("release"):
            deadline = time.time() + 120
            while not pathlib.Path(self.hparams["release"]).exists() and time.time() < deadline:
                time.sleep(0.05)
        return {"loss": loss}

    def evaluate_batch(self, batch: pytorch.TorchData, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        out = self.model(x)
        return {"validation_loss": self.loss_fn(out, y).item(),
                "accuracy": (out.argmax(1) == y).float().mean().item()}


def main() -> None:
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    parser = argparse.ArgumentParser()
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--batches", type=int)
    group.add_argument("--epochs", type=int)
    args = parser.parse_args()
    length = pytorch.Epoch(args.epochs) if args.epochs else pytorch.Batch(args.batches or 20)
    info = det.get_cluster_info()
    if info is None:  # off the cluster: the script reads its hyperparameters itself
        hparams = yaml.safe_load(pathlib.Path("const.yaml").read_text())["hyperparameters"]
        latest = None
    else:
        hparams, latest = info.trial.hparams, info.latest_checkpoint
    with pytorch.init() as context:
        trial = Digits(context, hparams=hparams)
        pytorch.Trainer(trial, context).fit(max_length=length, latest_checkpoint=latest,
                                            validation_period=pytorch.Batch(10))


if __name__ == "__main__":
    main()
