"""Runs MNistTrial locally with the Trainer: `python train_local.py OUT.pth [batches]`.

Writes the final weights (state_dict) to OUT.pth. ``PT_SIGTERM_AT=k`` sends SIGTERM to
this process after batch k (a real signal: the Trainer checkpoints and stops);
``PT_BATCH_SLEEP=s`` makes every batch take s seconds longer (the ranks agree on a stop
about every 0.2 s of training: slow batches make that a few batches, whatever the
machine's speed); ``DET_RESUME`` continues a stopped run; ``PT_CHECKPOINT_STORAGE``
(JSON) is the config's ``checkpoint_storage`` (default: the run's folder).
"""

import json
import os
import signal
import sys
import time

import torch
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_def import MNistTrial

import det_sdk.pytorch as pytorch


class Trial(MNistTrial):
    def train_batch(self, batch, model, epoch_idx, batch_idx):
        out = super().train_batch(batch, model, epoch_idx, batch_idx)
        time.sleep(float(os.environ.get("PT_BATCH_SLEEP", "0")))
        at = int(os.environ.get("PT_SIGTERM_AT", "0"))
        self.seen = getattr(self, "seen", 0) + 1
        if at and self.seen == at and self.context.distributed.rank == 0:
            os.kill(os.getpid(), signal.SIGTERM)
        return out


def main() -> None:
    out, batches = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "const.yaml")) as f:
        config = yaml.safe_load(f)
    config["hyperparameters"].update(json.loads(os.environ.get("PT_HP", "{}")))
    if os.environ.get("PT_CHECKPOINT_STORAGE"):
        config["checkpoint_storage"] = json.loads(os.environ["PT_CHECKPOINT_STORAGE"])
    with pytorch.init(config=config) as context:
        trainer = pytorch.Trainer(Trial(context), context)
        trainer.fit(max_length=pytorch.Batch(batches), checkpoint_period=pytorch.Batch(10),
                    validation_period=pytorch.Batch(10))
        if context.distributed.rank == 0 and trainer.batches_trained >= batches:
            torch.save(pytorch._trainer._unwrap(context.models[0]).state_dict(), out)


if __name__ == "__main__":
    main()
