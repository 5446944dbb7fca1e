"""det_sdk.pytorch's script-style API (issue 25): ``context.fit/evaluate/predict/
load_checkpoint_model/wrap_data`` without a Trial, on the Trainer's engine.

Real torch on CPU, tiny regression models, in process (one rank); the 2-rank test runs
real processes (torch.distributed over gloo) and is slow.

This module's other half, the tests that start no process: tests/integration/test_pytorch_script.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from det_sdk.env import outside
from harness.master import free_port

pytest.importorskip("torch")  # its scripts import torch (the Keras 2 venv has none)
ROOT = Path(__file__).resolve().parents[2]


_SCRIPT = r"""
import json, sys
import numpy as np
import torch
import torch.nn.functional as F
import det_sdk.pytorch as pytorch

rng = np.random.default_rng(0)
x = rng.normal(size=(90, 4)).astype("float32")
y = (x.sum(axis=1, keepdims=True) * 0.5).astype("float32")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
with pytorch.init(hparams={"global_batch_size": 16}, seed=7) as ctx:
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    val = ctx.fit(model, opt, F.mse_loss, (x, y), validation_data=(x[:37], y[:37]), epochs=2)
    ev = ctx.evaluate(model, (x[:37], y[:37]), loss_fn=F.mse_loss)
    pred = ctx.predict(model, (x[:37],))
    with torch.no_grad():
        local = model(torch.from_numpy(x[:37]))
    out = {"val": val, "eval": ev, "pred": pred.squeeze(1).tolist(),
           "pred_matches_local_model": bool(torch.allclose(pred, local)),
           "weights": [p.detach().flatten().tolist() for p in model.parameters()]}
    with open(sys.argv[1] + f".{ctx.distributed.rank}", "w") as f:
        json.dump(out, f)
"""


def _run_ranks(tmp_path: Path, name: str, n: int) -> list[dict]:
    script = tmp_path / "script.py"
    script.write_text(_SCRIPT)
    port = free_port()
    procs = []
    for rank in range(n):
        ranks = {} if n == 1 else {
            "RANK": str(rank), "WORLD_SIZE": str(n), "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(n), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        env = outside(DET_RUNS_DIR=str(tmp_path / name), **ranks)
        procs.append(subprocess.Popen([sys.executable, str(script), str(tmp_path / name)],
                                      env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-3000:]
    return [json.loads((tmp_path / f"{name}.{r}").read_text()) for r in range(n)]


def test_two_ranks_fit_evaluate_and_predict_as_one_process(tmp_path: Path) -> None:
    (one,) = _run_ranks(tmp_path, "one", 1)
    two = _run_ranks(tmp_path, "two", 2)
    assert two[0] == two[1]  # every rank returns the same (metrics, all the predictions)
    assert two[0]["pred_matches_local_model"]
    assert len(two[0]["pred"]) == 37  # every sample once, in order (37 = 16 + 16 + 5)
    # SGD, few steps: weights within float error of one process (issue 25's measurements)
    for a, b in zip(one["weights"], two[0]["weights"]):
        assert np.allclose(a, b, atol=1e-6)
    assert np.allclose(one["pred"], two[0]["pred"], atol=1e-5)
    for key in ("val", "eval"):
        for name, value in one[key].items():
            assert two[0][key][name] == pytest.approx(value, rel=1e-5)
