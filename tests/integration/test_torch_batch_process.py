"""det_sdk.pytorch.experimental.torch_batch_process (issue 40, item 4), in process: one rank.

The processor is tests/torch_batch/rows.py's (its outputs go under upload_path() in
on_checkpoint_start). Interrupted runs here raise from process_batch; the kill -9,
SIGTERM, torchrun and cluster runs are tests/e2e/test_torch_batch_process.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from det_sdk.errors import DetSdkError  # noqa: E402
from det_sdk.pytorch import experimental  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "torch_batch"))
import rows  # noqa: E402


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DET_RUNS_DIR", str(tmp_path / "det-runs"))
    monkeypatch.delenv("DET_RESUME", raising=False)
    return tmp_path / "det-runs"


def _output(runs: Path) -> Path:
    (root,) = (runs / "1" / "torch_batch_process").iterdir()
    return root


def _latest_meta(runs: Path) -> dict:
    (ckpt,) = (runs / "1" / "checkpoints").glob("*/metadata.json")
    return json.loads(ckpt.read_text())


def test_a_local_run_equals_a_plain_loop_over_the_same_batches(runs: Path) -> None:
    experimental.torch_batch_process(rows.Predict, rows.Rows(103), batch_size=10,
                                     checkpoint_interval=3)
    ids, preds = rows.read_outputs(_output(runs))
    assert ids.tolist() == list(range(103))
    assert np.array_equal(preds, rows.plain_loop(103, 10))
    meta = _latest_meta(runs)["torch_batch_process"]
    assert (meta["global_batches_done"], meta["finished"]) == (11, True)
    assert not (_output(runs) / ".staging").exists()


class Crash(rows.Predict):
    """Raises at global batch ``AT`` (once): an interruption between checkpoints."""

    AT = 7
    crashed = False

    def process_batch(self, batch, batch_idx) -> None:
        if batch_idx == self.AT and not type(self).crashed:
            type(self).crashed = True
            raise RuntimeError("interrupted")
        super().process_batch(batch, batch_idx)


class Flushing(Crash):
    """Writes its outputs at every batch (under upload_path), then crashes at ``AT``: the
    files of the batches after the last checkpoint are staged, never kept."""

    def process_batch(self, batch, batch_idx) -> None:
        super().process_batch(batch, batch_idx)
        self.on_checkpoint_start()


@pytest.mark.parametrize("cls", [Crash, Flushing])
def test_a_resumed_run_skips_the_checkpointed_batches_and_keeps_each_row_once(
        runs: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cls: type) -> None:
    cls.crashed = False
    log = tmp_path / "batches.log"
    monkeypatch.setenv("TBP_LOG", str(log))
    with pytest.raises(RuntimeError, match="interrupted"):
        experimental.torch_batch_process(cls, rows.Rows(103), batch_size=10,
                                         checkpoint_interval=3)
    first = [int(line.split()[1]) for line in log.read_text().splitlines()]
    assert first == list(range(7))
    assert _latest_meta(runs)["torch_batch_process"]["global_batches_done"] == 6
    monkeypatch.setenv("DET_RESUME", "latest")
    experimental.torch_batch_process(cls, rows.Rows(103), batch_size=10, checkpoint_interval=3)
    batches = [int(line.split()[1]) for line in log.read_text().splitlines()]
    assert batches == list(range(7)) + list(range(6, 11))  # batch 6 redone: after the checkpoint
    ids, preds = rows.read_outputs(_output(runs))
    assert ids.tolist() == list(range(103))  # each row once
    assert np.array_equal(preds, rows.plain_loop(103, 10))
    # a finished run resumed again does nothing
    experimental.torch_batch_process(cls, rows.Rows(103), batch_size=10, checkpoint_interval=3)
    assert len(log.read_text().splitlines()) == len(batches)


def test_max_batches_dataloader_kwargs_and_a_resume_of_another_dataset(
        runs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, list[int]]] = []

    class Record(experimental.TorchBatchProcessor):
        def __init__(self, context: experimental.TorchBatchProcessorContext) -> None:
            assert context.get_distributed_size() == 1 and context.get_distributed_rank() == 0

        def process_batch(self, batch, batch_idx) -> None:
            seen.append((batch_idx, batch[1]))

    experimental.torch_batch_process(
        Record, rows.Rows(50), max_batches=3, checkpoint_interval=2,
        dataloader_kwargs={"batch_size": 4, "collate_fn": lambda items: (None, [i for _, i in
                                                                                items])})
    assert seen == [(0, [0, 1, 2, 3]), (1, [4, 5, 6, 7]), (2, [8, 9, 10, 11])]
    monkeypatch.setenv("DET_RESUME", "latest")
    with pytest.raises(DetSdkError, match="50 rows in batches of 4, this one has 60 rows"):
        experimental.torch_batch_process(Record, rows.Rows(60), batch_size=4)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"dataloader_kwargs": {"shuffle": True}}, "'shuffle' must be false"),
    ({"dataloader_kwargs": {"sampler": []}}, "remove dataloader_kwargs 'sampler'"),
    ({"batch_size": 2, "dataloader_kwargs": {"batch_size": 3}}, "give one"),
    ({"checkpoint_interval": 0}, "checkpoint_interval must be an int >= 1"),
    ({"max_batches": -1}, "max_batches must be an int >= 1"),
])
def test_bad_arguments_are_refused_naming_them(runs: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(DetSdkError, match=message):
        experimental.torch_batch_process(rows.Predict, rows.Rows(5), **kwargs)
    with pytest.raises(DetSdkError, match=r"must be a map-style dataset .* or an iterable"):
        experimental.torch_batch_process(rows.Predict, 42)
    with pytest.raises(DetSdkError, match="TorchBatchProcessor subclass"):
        experimental.torch_batch_process(object, rows.Rows(5))  # type: ignore[arg-type]


def test_determined_names_resolve_to_det_sdk() -> None:
    import importlib

    compat = str(Path(experimental.__file__).parents[2] / "_compat_path")
    sys.path.insert(0, compat)
    try:
        mod = importlib.import_module("determined.pytorch.experimental")
    finally:
        sys.path.remove(compat)
    assert mod.torch_batch_process is experimental.torch_batch_process
    assert mod.TorchBatchProcessor is experimental.TorchBatchProcessor


def test_reducers_metrics_and_the_checkpoints_a_task_uses_are_kept(runs: Path) -> None:
    from det_sdk.pytorch import MetricReducer

    class Count(MetricReducer):
        def reset(self) -> None:
            self.n = 0

        def per_slot_reduce(self) -> int:
            return self.n

        def cross_slot_reduce(self, per_slot: list) -> int:
            return sum(per_slot)

    class Counting(experimental.TorchBatchProcessor):
        def __init__(self, context: experimental.TorchBatchProcessorContext) -> None:
            self.context = context
            self.count = context.wrap_reducer(Count(), name="rows")
            context.report_task_using_checkpoint("0f2b8c1e-0000-4000-8000-000000000001")

        def process_batch(self, batch, batch_idx) -> None:
            self.count.n += len(batch[1])
            self.context.report_metrics("training", batch_idx + 1, {"rows": float(self.count.n)})

    experimental.torch_batch_process(Counting, rows.Rows(23), batch_size=5)
    records = [json.loads(line) for line in (runs / "1" / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("group") == "validation" and r["metrics"] == {"rows": 23} for r in records)
    assert [r["metrics"]["rows"] for r in records if r.get("group") == "training"][-1] == 23
    assert _latest_meta(runs)["torch_batch_process"]["using_checkpoints"] == [
        "0f2b8c1e-0000-4000-8000-000000000001"]
