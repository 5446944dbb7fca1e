"""Determined's mnist_pytorch `train.py` (Trainer API, 0.38), imports renamed, small data.

    python train.py                                   # local: hparams below, one process
    python -m det_sdk.launch.torch_distributed --nproc-per-node 2 python train.py
    entrypoint: python3 -m det_sdk.launch.torch_distributed -- python3 train.py   # cluster
"""

import logging
import os
from typing import Any

import numpy as np
import torch
from torch import nn

import det_sdk as det
from det_sdk import pytorch


class MNistTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext, hparams: dict) -> None:
        self.context = context
        self.hparams = hparams
        path = hparams.get("npz") or os.environ["PT_NPZ"]
        with np.load(path) as f:
            self.data = {k: f[k] for k in f.files}
        self.model = context.wrap_model(nn.Sequential(
            nn.Flatten(), nn.Linear(64, 64), nn.ReLU(), nn.Dropout(hparams["dropout"]),
            nn.Linear(64, 10)))
        self.optimizer = context.wrap_optimizer(
            torch.optim.Adadelta(self.model.parameters(), lr=hparams["learning_rate"]))
        self.scheduler = context.wrap_lr_scheduler(
            torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=1, gamma=0.7),
            step_mode=pytorch.LRScheduler.StepMode.STEP_EVERY_EPOCH)

    def _ds(self, split: str) -> torch.utils.data.Dataset:
        return torch.utils.data.TensorDataset(torch.from_numpy(self.data[f"x_{split}"]),
                                              torch.from_numpy(self.data[f"y_{split}"]))

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(self._ds("train"), shuffle=True,
                                  batch_size=self.context.get_per_slot_batch_size())

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(self._ds("val"),
                                  batch_size=self.context.get_per_slot_batch_size())

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict:
        data, labels = batch
        output = self.model(data)
        loss = torch.nn.functional.cross_entropy(output, labels)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {"loss": loss}

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict:
        data, labels = batch
        output = self.model(data)
        validation_loss = torch.nn.functional.cross_entropy(output, labels).item()
        pred = output.argmax(dim=1, keepdim=True)
        accuracy = pred.eq(labels.view_as(pred)).sum().item() / len(data)
        return {"validation_loss": validation_loss, "accuracy": accuracy}


def run(local: bool = False) -> None:
    """Initializes the trial and runs the training loop (as Determined's train.py does)."""
    info = det.get_cluster_info()
    if local:
        hparams = {"learning_rate": 1.0, "dropout": 0.25, "global_batch_size": 32}
        latest_checkpoint = None
    else:
        hparams = info.trial.hparams
        latest_checkpoint = info.latest_checkpoint
    with pytorch.init(hparams=hparams if local else None) as train_context:
        trial = MNistTrial(train_context, hparams=hparams)
        trainer = pytorch.Trainer(trial, train_context)
        trainer.fit(max_length=pytorch.Epoch(2), latest_checkpoint=latest_checkpoint)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    run(local=det.get_cluster_info() is None)
