"""The PyTorch script context's streamed predict on 2 processes (det_sdk's torch
launcher): a stop asked by the master is taken by both after the same batch (exit 0), a
process failing ends both at their next meeting (no hang), and the reruns complete the
output bit-equal to the model's. tests/scripts/torch_predict_stream.py predicts; the
one-process behaviour is tests/integration/test_pytorch_predict_stream.py's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import det_sdk  # noqa: E402
from det_sdk.env import outside  # noqa: E402
from tests.support import REPO  # noqa: E402

SCRIPT = REPO / "tests" / "scripts" / "torch_predict_stream.py"
ROWS = 203  # global batches of 2 x 2 rows: 102 parts (the last of 1 row), 51 steps


def _run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "det_sdk.launch.torch_distributed", "--nproc-per-node", "2",
           "--", sys.executable, str(SCRIPT)]
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=180,
                          env=outside(PYTHONPATH=str(REPO), DET_RUNS_DIR=str(tmp_path / "runs"),
                                      PRED_OUT=str(tmp_path / "out"), PRED_ROWS=str(ROWS),
                                      **env))


def _parts(tmp_path: Path) -> list[int]:
    return sorted(int(p.name[5:14]) for p in (tmp_path / "out").glob("part-*.json"))


def test_two_processes_stop_together_fail_together_and_resume_exactly_once(
        tmp_path: Path) -> None:
    # the chief is asked to stop at its 2nd meeting (after step 20): both stop there
    stopped = _run(tmp_path, PRED_STOP_AFTER="1")
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    assert "stopped by the master after 80 of 203 rows (20 parts written" in stopped.stderr
    assert _parts(tmp_path) == list(range(40))  # 20 steps of both processes, nothing more
    # rank 1 fails reading row 91 (part 45, at step 22); rank 0 predicts on to the
    # meeting after step 29 (parts 44, 46, ... 58), where both end
    failed = _run(tmp_path, PRED_FAIL_AT="91")
    assert failed.returncode != 0
    assert "process 1 failed (OSError('the node went away'))" in failed.stderr
    assert _parts(tmp_path) == [*range(45), *range(46, 60, 2)]
    again = _run(tmp_path)  # the rest, from the parts kept
    assert again.returncode == 0, again.stderr[-3000:]
    assert "203 rows, 52 parts kept" in again.stderr
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    x = torch.from_numpy(np.random.default_rng(0).normal(size=(ROWS, 4)).astype("float32"))
    with torch.no_grad():
        expected = torch.cat([model(x[i:i + 2]) for i in range(0, ROWS, 2)]).numpy()
    assert np.array_equal(det_sdk.load_predictions(tmp_path / "out"), expected)
