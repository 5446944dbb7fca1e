"""The PyTorch script context's ``context.predict(model, data, output=DIR)``: the streamed
predictions in det_sdk.predictions' format (``det_sdk.load_predictions`` reads them), equal
to the model's outputs in order, bit for bit; an interruption in the data resumed exactly
once. One process, torch in process. (The Keras front's: tests/integration/test_predict_stream.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import det_sdk as det  # noqa: E402
import det_sdk.pytorch as pytorch  # noqa: E402
from det_sdk.predictions import PredictionsMismatchError, StreamedPredictions  # noqa: E402

ROWS, BATCH = 103, 10


class Rows(torch.utils.data.Dataset):
    """(x, y) rows whose ``__getitem__`` fails at row ``fail_at`` (a node going away)."""

    def __init__(self) -> None:
        rng = np.random.default_rng(0)
        self.x = torch.from_numpy(rng.normal(size=(ROWS, 4)).astype("float32"))
        self.fail_at: int | None = None

    def __len__(self) -> int:
        return ROWS

    def __getitem__(self, i: int):
        if i == self.fail_at:
            raise OSError("the node went away")
        return self.x[i], torch.zeros(1)


class Counted(torch.nn.Module):
    """A small model that counts the rows it predicts (to see each predicted once)."""

    def __init__(self, outputs: str = "tensor") -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(),
                                       torch.nn.Linear(8, 3))
        self.outputs, self.rows = outputs, 0

    def forward(self, x):
        self.rows += len(x)
        y = self.net(x)
        return {"y": y, "first": y[:, :1].to(torch.float64)} if self.outputs == "dict" else y


@pytest.fixture
def ctx(tmp_path: Path):
    with pytorch.init(hparams={"global_batch_size": BATCH}, runs_dir=tmp_path / "runs",
                      seed=1) as context:
        yield context


def _expected(model: Counted, data: Rows):
    """The model's outputs batch by batch, joined (what the parts must hold)."""
    with torch.no_grad():
        outs = [model(data.x[i:i + BATCH]) for i in range(0, ROWS, BATCH)]
    if isinstance(outs[0], dict):
        return {k: torch.cat([o[k] for o in outs]).numpy() for k in outs[0]}
    return torch.cat(outs).numpy()


@pytest.mark.parametrize("outputs", ["tensor", "dict"])
def test_streamed_outputs_are_the_models_in_order(ctx, tmp_path: Path, outputs: str) -> None:
    model, data = Counted(outputs), Rows()
    out = ctx.predict(model, data, output=tmp_path / "p")
    assert isinstance(out, StreamedPredictions)
    assert (out.rows, out.parts, out.resumed) == (ROWS, 11, 0)
    assert model.rows == ROWS and model.training  # each row once; the mode given back
    got, expected = det.load_predictions(out.path), _expected(model, data)
    if outputs == "dict":
        assert sorted(got) == ["first", "y"]
        assert all(got[k].dtype == expected[k].dtype and np.array_equal(got[k], expected[k])
                   for k in expected)
    else:
        assert got.dtype == np.float32 and np.array_equal(got, expected)
        in_memory = ctx.predict(model, data)  # without output=: the same values
        assert np.array_equal(in_memory.numpy(), got)
    manifest = json.loads((out.path / "manifest.json").read_text())
    assert manifest["complete"] and manifest["fingerprint"]["kind"] == "torch-dataset"


def test_an_interruption_resumes_exactly_once(ctx, tmp_path: Path) -> None:
    model, data = Counted(), Rows()
    data.fail_at = 45  # global batch 4's row 5
    with pytest.raises(OSError, match="went away"):
        ctx.predict(model, data, output=tmp_path, batch_size=BATCH)
    assert len(list(tmp_path.glob("part-*.json"))) == 4  # batches 0-3, whole
    assert model.rows == 40
    with pytest.raises(det.predictions.PredictionsIncompleteError):
        det.load_predictions(tmp_path)
    data.fail_at = None
    out = ctx.predict(model, data, output=tmp_path, batch_size=BATCH)
    assert (out.rows, out.resumed) == (ROWS, 4)
    assert model.rows == ROWS  # the 63 rows left, once: every row predicted exactly once
    assert np.array_equal(det.load_predictions(tmp_path), _expected(model, data))
    again = ctx.predict(model, data, output=tmp_path, batch_size=BATCH)
    assert again.resumed == 11 and model.rows == 2 * ROWS  # _expected's; none predicted


def test_another_model_or_batch_size_is_refused(ctx, tmp_path: Path) -> None:
    model, data = Counted(), Rows()
    ctx.predict(model, data, output=tmp_path)
    other = Counted()
    with torch.no_grad():
        other.net[0].weight.add_(1.0)
    with pytest.raises(PredictionsMismatchError, match=f"{tmp_path}.*another model"):
        ctx.predict(other, data, output=tmp_path)
    with pytest.raises(PredictionsMismatchError, match="batch_size=10 to continue"):
        ctx.predict(model, data, output=tmp_path, batch_size=20)


def test_a_stop_asked_by_the_master_is_taken_between_batches_and_resumed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """The real local session, whose preemption flag (the master's pause on the cluster)
    is raised from the 4th batch on; a rerun into the same output (the job activated)
    predicts the rest, each row once."""
    model, data, out = Counted(), Rows(), tmp_path / "out"
    acked: list[bool] = []
    with pytorch.init(hparams={"global_batch_size": BATCH}, runs_dir=tmp_path / "runs",
                      seed=1) as ctx:
        session = ctx._core._session
        asked = iter([False, False, False] + [True] * 20)
        monkeypatch.setattr(session, "should_preempt", lambda: next(asked))
        monkeypatch.setattr(session, "acknowledge_preemption", lambda: acked.append(True))
        with pytest.raises(SystemExit) as stop:
            ctx.predict(model, data, output=out)
    assert stop.value.code == 0 and acked == [True]  # a stop to resume, not a failure
    assert model.rows == 40 and model.training  # stopped right after the 4th batch
    assert sorted(p.name for p in out.glob("part-*.json")) == [
        f"part-00000000{i}.json" for i in range(4)]
    assert "stopped by the master after 40 of 103 rows (4 parts written" in \
        capsys.readouterr().err
    with pytest.raises(det.predictions.PredictionsIncompleteError):
        det.load_predictions(out)
    with pytorch.init(hparams={"global_batch_size": BATCH}, runs_dir=tmp_path / "runs",
                      seed=1) as ctx:
        result = ctx.predict(model, data, output=out)
    assert (result.rows, result.resumed) == (ROWS, 4)
    assert model.rows == ROWS  # the 63 rows left, once
    assert np.array_equal(det.load_predictions(out), _expected(model, data))
