"""PyTorch on det_sdk: Determined 0.38's PyTorchTrial API and the seed tutorial's interface.

Imports torch, never TensorFlow::

    import det_sdk.pytorch as pytorch

    class MyTrial(pytorch.PyTorchTrial):
        def __init__(self, context):
            self.context = context
            self.model = context.wrap_model(Net())
            self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), 0.1))
        def build_training_data_loader(self):
            return pytorch.DataLoader(train_ds, batch_size=self.context.get_per_slot_batch_size(),
                                      shuffle=True)
        def build_validation_data_loader(self):
            return pytorch.DataLoader(val_ds, batch_size=self.context.get_per_slot_batch_size())
        def train_batch(self, batch, epoch_idx, batch_idx):
            x, y = batch
            loss = F.cross_entropy(self.model(x), y)
            self.context.backward(loss)
            self.context.step_optimizer(self.opt)
            return {"loss": loss}
        def evaluate_batch(self, batch, batch_idx):
            x, y = batch
            return {"val_loss": F.cross_entropy(self.model(x), y)}

    with pytorch.init(hparams={"global_batch_size": 32}) as context:
        pytorch.Trainer(MyTrial(context), context).fit(max_length=pytorch.Epoch(2))
"""

from det_sdk.collectives.torch import TorchDistributed
from det_sdk.pytorch import experimental, samplers
from det_sdk.pytorch._data import DataLoader, TorchData
from det_sdk.pytorch._init import init
from det_sdk.pytorch._load import CheckpointLoadContext, load_trial_from_checkpoint_path
from det_sdk.pytorch._trainer import Trainer, TrainerError, load_state
from det_sdk.pytorch._trial import (
    Batch,
    Epoch,
    LRScheduler,
    MetricReducer,
    PyTorchCallback,
    PyTorchTrial,
    PyTorchTrialContext,
    Reducer,
    TrialContext,
    reset_parameters,
)

__all__ = ["Batch", "CheckpointLoadContext", "DataLoader", "Epoch", "LRScheduler",
           "MetricReducer", "PyTorchCallback", "PyTorchTrial", "PyTorchTrialContext", "Reducer",
           "TorchData", "TorchDistributed", "Trainer", "TrainerError", "TrialContext",
           "experimental", "init", "load_state", "load_trial_from_checkpoint_path",
           "reset_parameters", "samplers"]
