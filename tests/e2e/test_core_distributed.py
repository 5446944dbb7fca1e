"""det.core.DistributedContext built from ranks and the chief's address (Determined's
constructor): real TCP collectives between threads of this process, and the refusals.

This file: two ranks as processes, with no Horovod, torch or TensorFlow imported (the
in-process tests are in tests/unit/test_core_distributed.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.master import free_port

# Stack-neutral: det.core's TCP collectives load no Keras.
pytestmark = pytest.mark.stack_neutral

ROOT = Path(__file__).resolve().parents[2]


_SCRIPT = """
import sys
import det_sdk as det
rank, port = int(sys.argv[1]), int(sys.argv[2])
d = det.core.DistributedContext(rank=rank, size=2, local_rank=rank, local_size=2,
                                cross_rank=0, cross_size=1, chief_ip="127.0.0.1",
                                pub_port=port)
with det.core.init(distributed=d) as core_context:
    assert core_context.distributed.allgather(rank) == [0, 1]
    assert core_context.preempt.should_preempt() is False
heavy = [m for m in ("torch", "tensorflow", "horovod") if m in sys.modules]
print("ok", heavy)
"""


def test_two_processes_without_horovod_torch_or_tensorflow(tmp_path: Path) -> None:
    port = free_port()
    env = {"PATH": "/usr/bin:/bin", "DET_RUNS_DIR": str(tmp_path / "runs"),
           "HOME": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", _SCRIPT, str(r), str(port)], cwd=ROOT,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for r in (1, 0)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (stdout, stderr) in zip(procs, outs):
        assert p.returncode == 0, stderr[-2000:]
        assert stdout.strip() == "ok []"
