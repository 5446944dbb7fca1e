"""AMP on N ranks with Determined's ``wrap_scaler`` (tests/e2e/test_pytorch.py).

``python torch_amp.py OUT.json``, alone or under ``det_sdk.launch.torch_distributed``:
a PyTorchTrial of Determined's AMP shape (``wrap_scaler(GradScaler)``,
``backward(scaler.scale(loss))``, ``step_optimizer(opt, scaler=scaler)``) trains a
linear regression under float16 autocast (CPU) for 6 batches of a global 16 rows.
Row 3's target is 6 away from the zero model's output: at the scaler's initial 2**16 its
float16 loss gradient is 2*6/16 * 2**16 = 49152 on one process, but 98304 (past
float16's 65504) on a rank that averages its loss over its own 8 rows. Rank 0 writes
the scale after each batch and the final weights to OUT.json.
"""

import json
import sys

import torch

import det_sdk.pytorch as pytorch
from det_sdk.pytorch import DataLoader, PyTorchTrial

ROWS = 96


class AmpTrial(PyTorchTrial):
    def __init__(self, context):
        self.context = context
        model = torch.nn.Linear(4, 1)
        torch.nn.init.zeros_(model.weight)
        torch.nn.init.zeros_(model.bias)
        self.model = context.wrap_model(model)
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.01))
        self.scaler = context.wrap_scaler(torch.amp.GradScaler("cpu"))
        self.scales = []

    def _data(self):
        g = torch.Generator().manual_seed(0)
        x = torch.rand(ROWS, 4, generator=g) * 0.5
        y = torch.zeros(ROWS, 1)
        y[3] = 6.0
        return torch.utils.data.TensorDataset(x, y)

    def build_training_data_loader(self):
        return DataLoader(self._data(), batch_size=self.context.get_per_slot_batch_size())

    def build_validation_data_loader(self):
        return DataLoader(self._data(), batch_size=self.context.get_per_slot_batch_size())

    def train_batch(self, batch, epoch_idx, batch_idx):
        x, y = batch
        with torch.autocast("cpu", dtype=torch.float16):
            out = self.model(x)
        loss = torch.nn.functional.mse_loss(out.float(), y)
        self.context.backward(self.scaler.scale(loss))
        self.context.step_optimizer(self.opt, scaler=self.scaler)
        self.scales.append(self.scaler.get_scale())  # after step: update comes after the batch
        return {"loss": loss}

    def evaluate_batch(self, batch, batch_idx):
        x, y = batch
        return {"val_loss": torch.nn.functional.mse_loss(self.model(x), y)}


config = {"hyperparameters": {"global_batch_size": 16}, "reproducibility": {"experiment_seed": 3},
          "searcher": {"name": "single", "metric": "val_loss", "max_length": {"batches": 6}}}
with pytorch.init(config=config) as context:
    trial = AmpTrial(context)
    trainer = pytorch.Trainer(trial, context)
    trainer.fit(max_length=pytorch.Batch(6), checkpoint_period=pytorch.Batch(6),
                validation_period=pytorch.Batch(6))
    if context.distributed.rank == 0:
        model = pytorch._trainer._unwrap(context.models[0])
        with open(sys.argv[1], "w") as f:
            json.dump({"scale": trial.scaler.get_scale(), "scales": trial.scales,
                       "weight": model.weight.detach().ravel().tolist(),
                       "bias": model.bias.detach().ravel().tolist()}, f)
