"""torch_batch_process over an iterable (unsized) dataset, in process: one rank.

The dataset raises in its data at a given batch (once): the run fails there, a run with
``DET_RESUME=latest`` iterates past the checkpointed batches and processes the rest. The
processor counts every row it processes and keeps its outputs under ``upload_path()``
(tests/torch_batch/rows.py's pattern).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from det_sdk import session as session_mod  # noqa: E402
from det_sdk.errors import DetSdkError  # noqa: E402
from det_sdk.pytorch import experimental  # noqa: E402
from det_sdk.pytorch.experimental import _process  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "torch_batch"))
import rows  # noqa: E402


class Stream(torch.utils.data.IterableDataset):
    """rows.Rows(n)'s items, streamed (no ``__len__``); raises once before row ``fail_at``
    and counts the rows it yields (``read``)."""

    failed = False

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        self.rows, self.fail_at, self.read = rows.Rows(n), fail_at, 0

    def __iter__(self):
        for i in range(len(self.rows)):
            if i == self.fail_at and not type(self).failed:
                type(self).failed = True
                raise RuntimeError("the data failed")
            self.read += 1
            yield self.rows[i]


class Counting(rows.Predict):
    """rows.Predict that also records every row id it processes, in order."""

    processed: list[int] = []

    def process_batch(self, batch, batch_idx) -> None:
        type(self).processed.extend(int(i) for i in batch[1])
        super().process_batch(batch, batch_idx)


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DET_RUNS_DIR", str(tmp_path / "det-runs"))
    monkeypatch.delenv("DET_RESUME", raising=False)
    Stream.failed, Counting.processed = False, []
    return tmp_path / "det-runs"


@pytest.fixture
def reported(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int | None]]:
    """The (rows done, rows total) the run reports (a local session keeps none)."""
    calls: list[tuple[int, int | None]] = []

    def report_rows(self, rows_done, rows_total, output=None) -> None:
        calls.append((rows_done, rows_total))

    monkeypatch.setattr(session_mod.Session, "report_rows", report_rows)
    return calls


def _meta(runs: Path) -> dict:
    (ckpt,) = (runs / "1" / "checkpoints").glob("*/metadata.json")
    return json.loads(ckpt.read_text())["torch_batch_process"]


@pytest.mark.parametrize("fail_batch", [6, 7])
def test_an_interrupted_iterable_run_resumed_processes_each_row_once_in_order(
        runs: Path, reported: list, monkeypatch: pytest.MonkeyPatch, fail_batch: int) -> None:
    # 103 rows in batches of 10: 11 batches, checkpoints after batches 2, 5, 8 and the end;
    # the data fails at batch 6 (just after a checkpoint) or 7 (batch 6 is then redone)
    with pytest.raises(RuntimeError, match="the data failed"):
        experimental.torch_batch_process(Counting, Stream(103, fail_at=fail_batch * 10),
                                         batch_size=10, checkpoint_interval=3)
    assert Counting.processed == list(range(fail_batch * 10))
    meta = _meta(runs)
    assert (meta["global_batches_done"], meta["global_batches"], meta["rows"]) == (6, None, None)
    assert reported[-1] == (60, None)  # rows done, of an unknown total

    monkeypatch.setenv("DET_RESUME", "latest")
    stream = Stream(103)
    experimental.torch_batch_process(Counting, stream, batch_size=10, checkpoint_interval=3)
    # the done batches are iterated past (read, not processed); the rest processed in order
    assert stream.read == 103
    assert Counting.processed == list(range(fail_batch * 10)) + list(range(60, 103))
    if fail_batch == 6:  # interrupted at a checkpoint: every row processed once, in order
        assert Counting.processed == list(range(103))
    ids, preds = rows.read_outputs(next((runs / "1" / "torch_batch_process").iterdir()))
    assert ids.tolist() == list(range(103))  # each row's output kept once
    assert np.array_equal(preds, rows.plain_loop(103, 10))
    meta = _meta(runs)
    assert (meta["global_batches_done"], meta["global_batches"], meta["finished"]) == (11, 11,
                                                                                      True)
    assert reported[-1] == (103, 103)  # known once the data has ended
    assert all(total is None for _, total in reported[:-2])

    # a finished run resumed does nothing
    Counting.processed = []
    experimental.torch_batch_process(Counting, Stream(103), batch_size=10, checkpoint_interval=3)
    assert Counting.processed == []


def test_an_iterable_run_equals_a_plain_loop_and_honours_max_batches(runs: Path) -> None:
    seen: list[tuple[int, list[int]]] = []

    class Record(experimental.TorchBatchProcessor):
        def __init__(self, context: experimental.TorchBatchProcessorContext) -> None:
            pass

        def process_batch(self, batch, batch_idx) -> None:
            seen.append((batch_idx, [int(i) for i in batch[1]]))

    # a plain generator (any iterable) works too; max_batches caps the batches per process
    experimental.torch_batch_process(Record, (rows.Rows(50)[i] for i in range(50)),
                                     batch_size=4, max_batches=3, checkpoint_interval=2)
    assert seen == [(0, [0, 1, 2, 3]), (1, [4, 5, 6, 7]), (2, [8, 9, 10, 11])]


def test_an_iterable_dataset_is_dealt_to_ranks_in_global_batches() -> None:
    items = list(range(23))  # batches of 4: 0..5 (the last of 3 items)
    dealt = [list(_process._dealt(items, 4, first=0, rank=r, size=2, limit=None))
             for r in (0, 1)]
    assert dealt == [[*range(0, 4), *range(8, 12), *range(16, 20)],
                     [*range(4, 8), *range(12, 16), *range(20, 23)]]
    # resumed after 3 global batches, on 2 ranks, at most 5 global batches
    dealt = [list(_process._dealt(items, 4, first=3, rank=r, size=2, limit=5))
             for r in (0, 1)]
    assert dealt == [list(range(12, 16)), list(range(16, 20))]


def test_an_iterable_dataset_with_workers_or_resumed_as_a_sized_one_is_refused(
        runs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(DetSdkError, match="'num_workers' must be 0 with an iterable"):
        experimental.torch_batch_process(rows.Predict, Stream(5), batch_size=2,
                                         dataloader_kwargs={"num_workers": 2})
    experimental.torch_batch_process(rows.Predict, Stream(5), batch_size=2, max_batches=1)
    monkeypatch.setenv("DET_RESUME", "latest")
    with pytest.raises(DetSdkError, match="had an unsized dataset in batches of 2, this one "
                                          "has 5 rows"):
        experimental.torch_batch_process(rows.Predict, rows.Rows(5), batch_size=2)
