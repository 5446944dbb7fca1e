"""The seed tutorial's MNistTrial (PyTorchTrial, shape of Determined's tutorial), imports renamed.

Small enough for CI: 8x8 "images" from an npz the test writes (``data.npz`` in
the config's ``data`` section, or ``PT_NPZ``), two small conv layers, dropout.
"""

import os
from typing import Any, cast

import numpy as np
import torch
from torch import nn

import det_sdk as det
from det_sdk.pytorch import DataLoader, PyTorchTrial, reset_parameters

TorchData = Any


class Flatten(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.size(0), -1)


def error_rate(predictions: torch.Tensor, labels: torch.Tensor) -> float:
    matches = predictions.argmax(1) == labels.to(torch.long)
    return 1.0 - float(matches.sum()) / predictions.shape[0]


class MNistTrial(PyTorchTrial):
    def __init__(self, context: det.TrialContext) -> None:
        self.context = context
        path = self.context.get_data_config().get("npz") or os.environ["PT_NPZ"]
        with np.load(path) as f:
            self.data = {k: f[k] for k in f.files}

    def _dataset(self, split: str) -> torch.utils.data.TensorDataset:
        x = torch.from_numpy(self.data[f"x_{split}"]).float().unsqueeze(1)
        y = torch.from_numpy(self.data[f"y_{split}"]).long()
        return torch.utils.data.TensorDataset(x, y)

    def build_training_data_loader(self) -> DataLoader:
        return DataLoader(self._dataset("train"), batch_size=self.context.get_per_slot_batch_size(),
                          shuffle=True)

    def build_validation_data_loader(self) -> DataLoader:
        return DataLoader(self._dataset("val"), batch_size=self.context.get_per_slot_batch_size())

    def build_model(self) -> nn.Module:
        model = nn.Sequential(
            nn.Conv2d(1, self.context.get_hparam("n_filters1"), kernel_size=3),
            nn.ReLU(),
            nn.Conv2d(self.context.get_hparam("n_filters1"), self.context.get_hparam("n_filters2"),
                      kernel_size=3),
            nn.MaxPool2d(2),
            nn.ReLU(),
            Flatten(),
            nn.Linear(4 * self.context.get_hparam("n_filters2"), 32),
            nn.ReLU(),
            nn.Dropout(self.context.get_hparam("dropout")),
            nn.Linear(32, 10),
            nn.LogSoftmax(dim=1),
        )
        reset_parameters(model)
        return model

    def optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=self.context.get_hparam("learning_rate"),
                               momentum=0.9)

    def train_batch(self, batch: TorchData, model: nn.Module, epoch_idx: int,
                    batch_idx: int) -> dict[str, Any]:
        batch = cast(tuple[torch.Tensor, torch.Tensor], batch)
        data, labels = batch
        output = model(data)
        loss = torch.nn.functional.nll_loss(output, labels)
        error = error_rate(output, labels)
        return {"loss": loss, "train_error": error}

    def evaluate_batch(self, batch: TorchData, model: nn.Module) -> dict[str, Any]:
        batch = cast(tuple[torch.Tensor, torch.Tensor], batch)
        data, labels = batch
        output = model(data)
        error = error_rate(output, labels)
        return {"validation_error": error}
