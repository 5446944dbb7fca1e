"""A PyTorch Trainer fit on the GPU with ``profiling: {enabled: true}`` (a sample a
second), then checks what the profiler wrote to the local run's ``system.jsonl``: a
``gpu`` group with each visible GPU's UUID, its utilisation above 0 while the fit ran and
its used memory above what the process held before, and the per-batch ``timings`` (with
``torch.cuda.synchronize``: ``sync_timings``). Prints PASS or FAIL and the figures.

    python3 scripts/device/profiler_gpu_fit.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn

from det_sdk import pytorch


class Big(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 256 * 64

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(1024), torch.randn(1)


class Trial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context
        self.model = context.wrap_model(nn.Sequential(
            nn.Linear(1024, 8192), nn.ReLU(), nn.Linear(8192, 8192), nn.ReLU(),
            nn.Linear(8192, 1)))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=1e-4))

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(Big(), batch_size=256)

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(Big(), batch_size=1024)

    def train_batch(self, batch, epoch_idx, batch_idx):  # type: ignore[no-untyped-def]
        x, y = batch
        loss = 0.0
        for _ in range(20):  # keep the GPU busy for several samples
            loss = ((self.model(x) - y) ** 2).mean()
            self.context.backward(loss)
            self.context.step_optimizer(self.opt)
        return {"loss": loss}

    def evaluate_batch(self, batch, batch_idx):  # type: ignore[no-untyped-def]
        x, y = batch
        return {"validation_loss": ((self.model(x) - y) ** 2).mean().item()}


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp())
    runs = out / "runs"
    config = {"profiling": {"enabled": True, "sync_timings": True}}
    with pytorch.init(config=config, runs_dir=str(runs)) as context:
        pytorch.Trainer(Trial(context), context).fit(max_length=pytorch.Batch(60))
    records = [json.loads(line) for line in (runs / "1" / "system.jsonl").read_text()
               .splitlines()]
    gpu = [next(iter(r["metrics"].values())) for r in records if r["group"] == "gpu"]
    timings = [next(iter(r["metrics"].values())) for r in records if r["group"] == "timings"]
    print(json.dumps({"gpu": gpu, "timings": timings}, indent=1)[:4000])
    uuids = {u for g in gpu for u in g}
    busy = max((v["gpu_util"] for g in gpu for v in g.values()), default=0)
    used = max((v["gpu_memory_used"] for g in gpu for v in g.values()), default=0)
    ok = (bool(gpu) and all(u.startswith("GPU-") for u in uuids) and busy > 0 and used > 0
          and sum(t["batches"] for t in timings) == 60)
    print(f"{'PASS' if ok else 'FAIL'}: {len(gpu)} gpu records, GPUs {sorted(uuids)}, "
          f"peak utilisation {busy:.0f}%, peak memory used {used / 2**30:.2f} GiB, "
          f"{sum(t['batches'] for t in timings):.0f} batches timed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
