"""det_sdk.pytorch (issue 25): Determined's PyTorchTrial API on det.core, exact and the same on N.

Real torch on CPU: tiny models, an npz written here, real processes for the launcher,
SIGTERM and kill -9. Keras-2 venv: skipped (no torch there).

This module's other half, the tests that start no process: tests/integration/test_pytorch.py.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from det_sdk.env import outside  # noqa: E402
from harness.master import free_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MNIST = ROOT / "tests" / "pytorch_mnist"




def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in outside().items() if not k.startswith("PT_")}
    env.update(extra)
    return env


def test_pytorch_imports_no_tensorflow_and_keras_no_torch() -> None:
    code = ("import sys, det_sdk as det; det.pytorch.Trainer; det.TrialContext; "
            "print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=_clean_env())
    assert out.stdout.strip() == "False"
    code = "import sys, det_sdk.keras; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=_clean_env(TF_CPP_MIN_LOG_LEVEL="2"))
    assert out.stdout.strip().splitlines()[-1] == "False"


def _run(npz: Path, runs: Path, out: Path, nproc: int, batches: int = 30,
         **env: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(MNIST / "train_local.py"), str(out), str(batches)]
    if nproc > 1:
        cmd = [sys.executable, "-m", "det_sdk.launch.torch_distributed", "--nproc-per-node",
               str(nproc), *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=_clean_env(PT_NPZ=str(npz), DET_RUNS_DIR=str(runs), **env))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _weights(path: Path) -> dict:
    return torch.load(path, weights_only=True)


def _validations(runs: Path, group: str = "validation") -> list[dict]:
    lines = (runs / "1" / "metrics.jsonl").read_text().splitlines()
    return [(r["steps_completed"], r["metrics"]) for r in map(json.loads, lines)
            if r["group"] == group]


@pytest.mark.parametrize(("nproc", "store"), [
    (1, "local"),
    # 2 ranks and a bucket in one run (pairwise, not 2 x 2: the ranks' stop agreement and
    # RNG states are the same above any store, the store's seam the same under any ranks)
    pytest.param(2, "s3", marks=pytest.mark.stack_neutral)])  # torch: no Keras
def test_sigterm_mid_epoch_and_resume_is_bit_equal(npz: Path, tmp_path: Path, nproc: int,
                                                   store: str,
                                                   request: pytest.FixtureRequest) -> None:
    """shuffle=True, dropout 0.3: SIGTERM at batch 13 of 30, resume: the same bits.
    With ``s3``, the stopped and resumed run keep their checkpoints in a bucket
    (SeaweedFS): restored from there, none left on local disk, the uninterrupted run (on
    local disk) the reference.

    N ranks agree on a stop about every 0.2 s of training: batches of 50 ms make that
    every 4 batches or fewer, so the stop comes well before the end however fast the
    machine (with 5 ms batches the next agreement could fall after batch 30)."""
    env: dict[str, str] = {}
    if store == "s3":
        from tests.e2e.conftest import S3_BUCKET

        storage_cfg = request.getfixturevalue("seaweedfs").checkpoint_storage(
            S3_BUCKET, f"pytorch-{nproc}")
        scratch = tmp_path / "tmp"  # the processes' TMPDIR: no det_sdk folder left there
        scratch.mkdir()
        env = {"PT_CHECKPOINT_STORAGE": json.dumps(storage_cfg), "TMPDIR": str(scratch)}
    _run(npz, tmp_path / "a", tmp_path / "a.pth", nproc)
    stopped = _run(npz, tmp_path / "b", tmp_path / "b.pth", nproc, PT_SIGTERM_AT="13",
                   PT_BATCH_SLEEP="0.05", **env)
    assert "SIGTERM" in stopped.stderr and not (tmp_path / "b.pth").exists()
    _run(npz, tmp_path / "b", tmp_path / "b.pth", nproc, DET_RESUME="latest", **env)
    a, b = _weights(tmp_path / "a.pth"), _weights(tmp_path / "b.pth")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert _validations(tmp_path / "a") == _validations(tmp_path / "b")
    # the training metrics too, row for row: the stop's unreported batches rode in its
    # checkpoint and were reported with the rest of their window, at the same step
    assert _validations(tmp_path / "a", "training") == _validations(tmp_path / "b", "training")
    if store == "s3":
        from det_sdk.storage import open_storage

        recorded = [json.loads(line)["uuid"] for line in
                    (tmp_path / "b" / "1" / "checkpoints.jsonl").read_text().splitlines()]
        listed = open_storage(storage_cfg).list()
        assert recorded[-1] in listed and set(listed) <= set(recorded), (listed, recorded)
        local = tmp_path / "b" / "1" / "checkpoints"
        assert not local.exists() or not any(local.iterdir())
        # det_sdk's staging and restore folders gone (torch keeps its own cache there)
        assert not [p for p in scratch.iterdir() if p.name.startswith("det-")], \
            list(scratch.iterdir())


def test_two_ranks_train_as_one_process(npz: Path, tmp_path: Path) -> None:
    """Dropout 0: 2 ranks of half batches reach the 1-process weights within float error."""
    hp = json.dumps({"dropout": 0.0})
    _run(npz, tmp_path / "one", tmp_path / "one.pth", 1, PT_HP=hp)
    _run(npz, tmp_path / "two", tmp_path / "two.pth", 2, PT_HP=hp)
    a, b = _weights(tmp_path / "one.pth"), _weights(tmp_path / "two.pth")
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-5
    for (s1, m1), (s2, m2) in zip(_validations(tmp_path / "one"), _validations(tmp_path / "two")):
        assert s1 == s2 and abs(m1["validation_error"] - m2["validation_error"]) <= 0.005


def test_a_killed_rank_makes_the_other_exit_within_60s(npz: Path, tmp_path: Path) -> None:
    """kill -9 of rank 1 (no launcher to clean up): rank 0 fails its next collective."""
    port = free_port()
    procs = []
    for rank in range(2):
        env = _clean_env(PT_NPZ=str(npz), DET_RUNS_DIR=str(tmp_path / "runs"), RANK=str(rank),
                         WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                         MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen(
            [sys.executable, str(MNIST / "train_local.py"), str(tmp_path / "w.pth"), "100000"],
            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    try:
        deadline = time.monotonic() + 120
        while not list((tmp_path / "runs").glob("*/checkpoints/*")):  # training is under way
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
            time.sleep(0.2)
        procs[1].send_signal(signal.SIGKILL)
        t0 = time.monotonic()
        procs[0].wait(timeout=60)
        assert procs[0].returncode != 0
        assert time.monotonic() - t0 < 60
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_amp_with_wrap_scaler_skips_on_two_ranks_what_one_process_skips(
        tmp_path: Path) -> None:
    """Determined's AMP shape (wrap_scaler, backward(scaler.scale(loss)),
    step_optimizer(scaler=)), float16 autocast: a row whose float16 loss gradient fits
    at the global batch overflows on a rank that averages its loss over its half. With
    the loss divided by N and DDP summing, 2 ranks apply the step one process applies
    (before: ``wrap_scaler`` did not exist and ``scaler=`` was ignored; averaged, the
    first step was skipped and the scale halved)."""
    script = ROOT / "tests" / "scripts" / "torch_amp.py"
    reports = {}
    for nproc in (1, 2):
        cmd = [sys.executable, str(script), str(tmp_path / f"{nproc}.json")]
        if nproc > 1:
            cmd = [sys.executable, "-m", "det_sdk.launch.torch_distributed",
                   "--nproc-per-node", str(nproc), *cmd]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT,
                              env=_clean_env(DET_RUNS_DIR=str(tmp_path / f"runs{nproc}")))
        assert proc.returncode == 0, proc.stderr[-3000:]
        reports[nproc] = json.loads((tmp_path / f"{nproc}.json").read_text())
    one, two = reports[1], reports[2]
    assert one["scales"] == [2.0**16] * 6  # nothing skipped on one process
    assert two["scales"] == one["scales"]
    assert one["bias"][0] > 0.005  # the overflow-prone row's step was applied
    for k in ("weight", "bias"):
        assert two[k] == pytest.approx(one[k], abs=1e-6)
