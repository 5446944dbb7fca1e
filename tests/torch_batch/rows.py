"""A torch_batch_process script over generated rows, for the tests (tests/*/test_torch_batch*).

Each batch's predictions (and the row ids) are kept in memory and written under
``context.upload_path()`` in ``on_checkpoint_start``: the exactly-once pattern of
docs/batch-inference.md. Settings from the environment (the tests run it as a script,
locally and on the cluster): ``TBP_ROWS``, ``TBP_BATCH``, ``TBP_INTERVAL``,
``TBP_SLEEP`` (seconds per batch), ``TBP_LOG`` (a file each processed batch is appended to),
``TBP_ITERABLE`` (1: the rows as an iterable dataset, without ``__len__``).
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import numpy as np
import torch

from det_sdk.pytorch import experimental


class Rows(torch.utils.data.Dataset):
    """``n`` rows of 4 features; an item is (features, row id)."""

    def __init__(self, n: int) -> None:
        self.x = np.random.default_rng(0).normal(size=(n, 4)).astype("float32")

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.from_numpy(self.x[i]), i


class Stream(torch.utils.data.IterableDataset):
    """``Rows(n)``'s items, streamed: an iterable dataset (no ``__len__``)."""

    def __init__(self, n: int) -> None:
        self.rows = Rows(n)

    def __iter__(self):
        return (self.rows[i] for i in range(len(self.rows)))


def build_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def plain_loop(n: int, batch_size: int) -> np.ndarray:
    """What a plain loop over ``Rows(n)`` predicts, on the device the processor's model is
    put on (a GPU's kernels round differently from the CPU's)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = build_model().to(device).eval()
    loader = torch.utils.data.DataLoader(Rows(n), batch_size=batch_size)
    with torch.no_grad():
        return np.concatenate([model(x.to(device)).cpu().numpy() for x, _ in loader])


class Predict(experimental.TorchBatchProcessor):
    def __init__(self, context: experimental.TorchBatchProcessorContext) -> None:
        self.context = context
        self.model = context.prepare_model_for_inference(build_model())
        self.out: list[tuple[np.ndarray, np.ndarray]] = []
        self.log = os.environ.get("TBP_LOG")
        self.sleep = float(os.environ.get("TBP_SLEEP", "0"))

    def process_batch(self, batch, batch_idx) -> None:
        x, ids = batch
        with torch.no_grad():
            pred = self.model(self.context.to_device(x)).cpu().numpy()
        self.out.append((ids.numpy(), pred))
        if self.log:
            with open(self.log, "a") as f:
                f.write(f"{self.context.get_distributed_rank()} {batch_idx} {int(ids[0])}\n")
        time.sleep(self.sleep)

    def on_checkpoint_start(self) -> None:
        if not self.out:
            return
        ids = np.concatenate([i for i, _ in self.out])
        preds = np.concatenate([p for _, p in self.out])
        with self.context.upload_path() as path:
            # a new name each time: a batch whose rows were kept twice would show twice
            np.savez(Path(path) / f"rows-{int(ids[0]):08d}-{uuid.uuid4().hex}.npz", ids=ids,
                     preds=preds)
        self.out = []


def read_outputs(root: Path) -> tuple[np.ndarray, np.ndarray]:
    """Every row id written under ``root`` (with repeats, if any) and their predictions,
    ordered by id."""
    files = sorted(Path(root).glob("rank_*/rows-*.npz"))
    if not files:
        return np.zeros(0, "int64"), np.zeros((0, 3), "float32")
    loaded = [np.load(f) for f in files]
    ids = np.concatenate([f["ids"] for f in loaded])
    preds = np.concatenate([f["preds"] for f in loaded])
    order = np.argsort(ids, kind="stable")
    return ids[order], preds[order]


def main() -> None:
    n = int(os.environ.get("TBP_ROWS", "500"))
    experimental.torch_batch_process(
        Predict, Stream(n) if os.environ.get("TBP_ITERABLE") == "1" else Rows(n),
        batch_size=int(os.environ.get("TBP_BATCH", "10")),
        checkpoint_interval=int(os.environ.get("TBP_INTERVAL", "3")))


if __name__ == "__main__":
    main()
