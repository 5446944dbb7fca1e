"""det_sdk.pytorch's script-style API (issue 25): ``context.fit/evaluate/predict/
load_checkpoint_model/wrap_data`` without a Trial, on the Trainer's engine.

Real torch on CPU, tiny regression models, in process (one rank); the 2-rank test runs
real processes (torch.distributed over gloo) and is slow.

This module's other half, its end-to-end tests (real processes): tests/e2e/test_pytorch_script.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import det_sdk.pytorch as pytorch  # noqa: E402
from det_sdk.errors import DetSdkError  # noqa: E402

F = torch.nn.functional


def _data(n: int = 90, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32") + 0.1).astype("float32")
    return x, y


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def _mae(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (out - y).abs().mean()


def _fit(runs: Path, epochs: int, resume: int | None = None) -> torch.nn.Module:
    x, y = _data()
    model = _model()
    with pytorch.init(hparams={"global_batch_size": 16}, runs_dir=runs, seed=5,
                      resume=resume) as ctx:
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        ctx.fit(model, opt, F.mse_loss, (x, y), validation_data=_data(40, seed=1),
                epochs=epochs)
    return model


def test_fit_trains_in_place_validates_per_sample_and_reloads(tmp_path: Path) -> None:
    x, y = _data()
    xv, yv = _data(40, seed=1)
    model = _model()
    before = F.mse_loss(model(torch.from_numpy(x)), torch.from_numpy(y)).item()
    with pytorch.init(hparams={"global_batch_size": 16}, runs_dir=tmp_path, seed=5) as ctx:
        assert ctx.hparams == {"global_batch_size": 16}
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        val = ctx.fit(model, opt, F.mse_loss, (x, y), validation_data=(xv, yv), epochs=3,
                      metrics={"mae": _mae})
        # fit trains the model where it put it: the rank's device (a GPU if there is one)
        assert next(model.parameters()).device == ctx.device
        xt, yt = ctx.to_device(torch.from_numpy(xv)), ctx.to_device(torch.from_numpy(yv))
        with torch.no_grad():
            out = model(xt)
        # the user's model is the trained one; 40 rows in batches of 16, 16, 8: the
        # per-sample mean, not a mean of batch means
        assert val["val_loss"] == pytest.approx(F.mse_loss(out, yt).item(), rel=1e-5)
        assert val["val_mae"] == pytest.approx(_mae(out, yt).item(), rel=1e-5)
        assert F.mse_loss(model(ctx.to_device(torch.from_numpy(x))),
                          ctx.to_device(torch.from_numpy(y))).item() < before
        assert ctx.evaluate(model, (xv, yv), loss_fn=F.mse_loss, metrics={"mae": _mae}) == \
            pytest.approx({"loss": val["val_loss"], "mae": val["val_mae"]}, rel=1e-5)
        assert torch.allclose(ctx.predict(model, (xv,)), out.cpu())  # outputs come on the CPU
        # reload into a fresh model: the trained weights
        fresh = ctx.load_checkpoint_model(_model())
        assert all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(fresh.state_dict().values(),
                                                                 model.state_dict().values()))
        best = ctx.load_checkpoint_model(_model(), best=True)
        assert isinstance(best, torch.nn.Module)
        with pytest.raises(DetSdkError, match="one fit per"):
            ctx.fit(model, opt, F.mse_loss, (x, y), epochs=1)
    run = next(p for p in tmp_path.iterdir() if p.is_dir())
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert {r["group"] for r in rows} == {"training", "validation"}
    # 90 rows / 16 = 5 full batches and a short one of 10 per epoch: 6 x 3
    assert max(r["steps_completed"] for r in rows) == 18


def test_resumed_fit_is_bit_equal_to_an_uninterrupted_one(tmp_path: Path) -> None:
    whole = _fit(tmp_path / "a", epochs=4)
    _fit(tmp_path / "b", epochs=2)
    resumed = _fit(tmp_path / "b", epochs=4, resume=1)
    assert all(torch.equal(a, b) for a, b in zip(whole.state_dict().values(),
                                                 resumed.state_dict().values()))


def test_evaluate_and_predict_take_datasets_and_loaders(tmp_path: Path) -> None:
    x, y = _data(10)
    model = _model()
    ds = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    with pytorch.init(hparams={"global_batch_size": 4}, runs_dir=tmp_path) as ctx:
        want = F.mse_loss(model(ds.tensors[0]), ds.tensors[1]).item()
        for data in (ds, ctx.wrap_data(ds, batch_size=3), (x, y)):
            assert ctx.evaluate(model, data, loss_fn=F.mse_loss)["loss"] == \
                pytest.approx(want, rel=1e-5)
        assert torch.allclose(ctx.predict(model, torch.from_numpy(x)), model(ds.tensors[0]))
        assert model.training  # evaluate/predict put it back as it was


def test_script_api_refuses_what_it_cannot_train(tmp_path: Path) -> None:
    x, y = _data()
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytorch.init(hparams={"global_batch_size": 16}, runs_dir=tmp_path) as ctx:
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(
            torch.from_numpy(x), torch.from_numpy(y)), batch_size=4)
        with pytest.raises(DetSdkError, match=r"not a torch\.utils\.data\.DataLoader"):
            ctx.wrap_data(loader)
        with pytest.raises(DetSdkError, match="different numbers of rows"):
            ctx.wrap_data((x, y[:5]))
        with pytest.raises(TypeError, match=r"optimizer must be a torch\.optim\.Optimizer"):
            ctx.fit(model, "adam", F.mse_loss, (x, y), epochs=1)
        with pytest.raises(ValueError, match="epochs must be an int >= 1"):
            ctx.fit(model, opt, F.mse_loss, (x, y), epochs=0)
        with pytest.raises(ValueError, match="give loss_fn or metrics"):
            ctx.evaluate(model, (x, y))
        with pytest.raises(DetSdkError, match=r"a batch must be \(inputs, targets\)"):
            ctx.evaluate(model, (x, x, y), loss_fn=F.mse_loss)
        with pytest.raises(DetSdkError, match="has no checkpoint"):
            ctx.load_checkpoint_model(_model())
