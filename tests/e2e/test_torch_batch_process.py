"""torch_batch_process (issue 40, item 4) in real processes: interrupted and resumed.

tests/torch_batch/rows.py is the script: 40 batches of 10 generated rows, progress every
3 batches, each checkpoint's predictions written under ``upload_path()``. Locally it is
killed (SIGKILL, or SIGTERM: it stops at the next checkpoint and exits 0) mid-way and run
again with ``DET_RESUME=latest``; on the master it runs on 2 slots and is paused and
activated. Every time: each row's prediction is kept exactly once, equal to a plain loop's.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

torch = pytest.importorskip("torch")

from det_sdk.env import outside  # noqa: E402
from harness.master import Cluster, create, describe, wait_until  # noqa: E402
from tests.support import REPO  # noqa: E402

HERE = REPO / "tests" / "torch_batch"
ROWS, BATCH, INTERVAL = 400, 10, 3  # 40 global batches

sys.path.insert(0, str(HERE))
import rows  # noqa: E402


def _reference() -> np.ndarray:
    model = rows.build_model().eval()
    loader = torch.utils.data.DataLoader(rows.Rows(ROWS), batch_size=BATCH)
    with torch.no_grad():
        return np.concatenate([model(x).numpy() for x, _ in loader])


def _check_outputs(root: Path) -> None:
    ids, preds = rows.read_outputs(root)
    assert ids.tolist() == list(range(ROWS))  # every row, once
    assert np.allclose(preds, _reference(), atol=1e-6)


def _batches(log: Path) -> list[tuple[int, int]]:
    """(rank, first row id) of every processed batch, in the order logged."""
    return [(int(r), int(first)) for r, _, first in
            (line.split() for line in log.read_text().splitlines())]


def _env(tmp_path: Path, sleep: float) -> dict[str, str]:
    return outside(TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO),
                   DET_RUNS_DIR=str(tmp_path / "det-runs"), TBP_ROWS=str(ROWS),
                   TBP_BATCH=str(BATCH), TBP_INTERVAL=str(INTERVAL), TBP_SLEEP=str(sleep),
                   TBP_LOG=str(tmp_path / "batches.log"))


def _cmd(procs: int) -> list[str]:
    cmd = [sys.executable, str(HERE / "rows.py")]
    if procs == 2:
        cmd = [sys.executable, "-m", "det_sdk.launch.torch_distributed", "--nproc-per-node",
               "2", "--", *cmd]
    return cmd


@pytest.mark.parametrize(("procs", "sig", "iterable"), [
    (1, signal.SIGKILL, False), (1, signal.SIGTERM, False), (2, signal.SIGKILL, False),
    (2, signal.SIGKILL, True)])
def test_a_local_run_interrupted_and_resumed_keeps_every_row_once(
        tmp_path: Path, procs: int, sig: signal.Signals, iterable: bool) -> None:
    """2 processes (det_sdk's torch launcher) killed, resumed on 1: the batches left. An
    iterable dataset's run is resumed on 2 processes (the end found by 2 ranks)."""
    log = tmp_path / "batches.log"
    env = {**_env(tmp_path, 0.05), "TBP_ITERABLE": "1" if iterable else "0"}
    proc = subprocess.Popen(_cmd(procs), cwd=tmp_path, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until("8 batches", lambda: (log.exists() and len(_batches(log)) >= 8) or
                   proc.poll() is not None, timeout=120)
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        os.killpg(proc.pid, sig) if sig == signal.SIGKILL else proc.send_signal(sig)
        rc = proc.wait(60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        err = proc.stderr.read()
        proc.stderr.close()
    assert rc == (0 if sig == signal.SIGTERM else -signal.SIGKILL), err[-3000:]
    if sig == signal.SIGTERM:
        assert "stopped after" in err
    before = len(_batches(log))
    assert before < ROWS // BATCH
    again = subprocess.run(_cmd(2 if iterable else 1), cwd=tmp_path,
                           env={**env, "TBP_SLEEP": "0", "DET_RESUME": "latest"},
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    firsts = [first for _, first in _batches(log)]
    assert sorted(set(firsts)) == list(range(0, ROWS, BATCH))  # every batch processed
    redone = len(firsts) - ROWS // BATCH
    assert 0 <= redone <= INTERVAL * procs  # at most one interval per process, again
    (root,) = (tmp_path / "det-runs" / "1" / "torch_batch_process").iterdir()
    _check_outputs(root)


RUN = '''
import os
os.environ.update({"TBP_ROWS": "%d", "TBP_BATCH": "%d", "TBP_INTERVAL": "%d",
                   "TBP_SLEEP": "0.15", "TBP_LOG": %r})
import rows
rows.main()
'''


def test_on_two_slots_paused_and_activated_keeps_every_row_once(tmp_path: Path,
                                                                   cluster: Cluster) -> None:
    model_dir = tmp_path / "model"
    shutil.copytree(HERE, model_dir, ignore=shutil.ignore_patterns("__pycache__"))
    log = tmp_path / "batches.log"
    (model_dir / "run.py").write_text(RUN % (ROWS, BATCH, INTERVAL, str(log)))
    cfg = tmp_path / "tbp.yaml"
    cfg.write_text(yaml.safe_dump({
        "name": "tbp", "max_restarts": 0, "resources": {"slots_per_trial": 2},
        "entrypoint": "python3 -m det_sdk.launch.torch_distributed -- python3 run.py",
        "searcher": {"name": "single", "metric": "x"},
        "checkpoint_storage": {"save_trial_latest": 100}}))
    exp = create(cluster, cfg, model_dir)
    wait_until("6 batches", lambda: log.exists() and len(_batches(log)) >= 6, timeout=180)
    assert cluster.det("experiment", "pause", str(exp)).returncode == 0
    wait_until("PAUSED", lambda: describe(cluster, exp)["state"] == "PAUSED", timeout=120)
    at_pause = len(_batches(log))
    assert at_pause < ROWS // BATCH
    assert cluster.det("experiment", "activate", str(exp)).returncode == 0
    assert cluster.det("experiment", "wait", str(exp), timeout=600).returncode == 0
    (trial,) = describe(cluster, exp)["trials"]
    logs = cluster.det("experiment", "logs", str(exp)).stdout[-3000:]
    assert trial["state"] == "COMPLETED", logs
    assert trial["restarts"] == 0
    firsts = [first for _, first in _batches(log)]
    assert sorted(set(firsts)) == list(range(0, ROWS, BATCH))
    assert len(firsts) - ROWS // BATCH <= INTERVAL * 2
    ckpts = json.loads(cluster.det("checkpoint", "list", "--trial", str(trial["id"]),
                                   "--json").stdout)
    assert max(c["steps_completed"] for c in ckpts) == ROWS // BATCH // 2
    (root,) = cluster.root.rglob(f"trial_files/{exp}/trial_{trial['id']}/torch_batch_process/*")
    _check_outputs(root)


def test_a_job_on_two_slots_keeps_its_outputs_with_the_job(tmp_path: Path,
                                                           cluster: Cluster) -> None:
    """`det job run`: no checkpoints for jobs; progress is a file beside the outputs."""
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({
        "entrypoint_script": "python3 rows.py", "resources": {"slots": 2},
        "environment": {"environment_variables": [f"TBP_ROWS={ROWS}", f"TBP_BATCH={BATCH}"]}}))
    out = cluster.det("job", "run", str(job), str(HERE), "--follow", timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    job_id = out.stdout.split("Created job ")[1].split()[0]
    got = cluster.det("job", "download", job_id, str(tmp_path / "files"))
    assert got.returncode == 0, got.stderr
    (root,) = (tmp_path / "files" / "torch_batch_process").iterdir()
    progress = json.loads((root / "progress.json").read_text())["torch_batch_process"]
    assert (progress["global_batches_done"], progress["finished"]) == (ROWS // BATCH, True)
    _check_outputs(root)
