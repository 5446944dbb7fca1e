"""Determined's batch processing API (``determined.pytorch.experimental``) on det_sdk.

:func:`torch_batch_process` shards a sized dataset over the processes, calls a
:class:`TorchBatchProcessor`'s ``process_batch`` for each of this process's batches,
checkpoints progress every ``checkpoint_interval`` batches and resumes from it. It runs
on the cluster (a trial or a job) and locally (``python script.py``, ``torchrun``,
``horovodrun``; ``DET_RESUME=latest`` resumes). Files written under
:meth:`TorchBatchProcessorContext.upload_path` are kept exactly once per batch across
interruptions (docs/batch-inference.md, "torch_batch_process")::

    from det_sdk.pytorch import experimental

    class Predict(experimental.TorchBatchProcessor):
        def __init__(self, context):
            self.context = context
            self.model = context.prepare_model_for_inference(build_model())
            self.rows = []
        def process_batch(self, batch, batch_idx):
            with torch.no_grad():
                self.rows.append(self.model(self.context.to_device(batch[0])).cpu())
        def on_checkpoint_start(self):
            with self.context.upload_path() as path:
                torch.save(self.rows, path / f"preds-{uuid.uuid4()}.pt")
            self.rows = []

    experimental.torch_batch_process(Predict, dataset, batch_size=64, checkpoint_interval=10)
"""

from det_sdk.pytorch.experimental._context import (
    TorchBatchProcessor,
    TorchBatchProcessorContext,
)
from det_sdk.pytorch.experimental._process import BatchProcessError, torch_batch_process

__all__ = ["BatchProcessError", "TorchBatchProcessor", "TorchBatchProcessorContext",
           "torch_batch_process"]
