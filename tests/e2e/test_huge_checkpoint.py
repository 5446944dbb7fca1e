"""A checkpoint whose state.bin is over 2 GiB saves and restores bit-equal (issue 22).

One ``read()`` returns at most 2,147,479,552 bytes on Linux: the reader filled its
buffer with a single ``readinto`` and so failed the checksum of every such
checkpoint. A real local run of ``Embedding(140_000_000, 4)`` + SGD checkpoints
2.24 GB through the real writer (O_DIRECT where the filesystem takes it); a second
run with ``DET_RESUME`` restores it into a table of zeros and must hold exactly the
weights the first one had (xxh3-64 of every weight, in place). About 30 s and 5.2 GB
peak memory per process on this project's VM; the 2.24 GB of files are deleted.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support import SCRIPTS, run_python

HUGE = SCRIPTS / "huge_checkpoint.py"
TWO_GIB = 2 << 30
# The first stack only: the 2 GiB limit is the reader's and the writer's (det_sdk's own
# files, one seam for both stacks); how each stack's weights reach them is tested on both
# with small models, and this test's two 5 GB processes cost the Keras 2 pass 104 s of
# CPU and 281 s of a worker (fresh clone of 2026-11-29).
pytestmark = pytest.mark.stack_neutral


# Two processes, each given 300 s: the test's own limit must hold both (the suite's
# default, 300 s, stopped it once mid-restore on a machine 1.4x slower, 4 files at a
# time, while neither process had reached its limit).
@pytest.mark.timeout(660)
def test_a_checkpoint_over_2_gib_restores_bit_equal(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    try:
        saved = run_python(HUGE, {"DET_RUNS_DIR": str(runs),
                                  "HUGE_DIGEST_OUT": str(tmp_path / "saved.json")}, timeout=300)
        assert saved.returncode == 0, saved.stderr[-3000:]
        [ckpt] = [p for p in (runs / "1" / "checkpoints").iterdir() if not p.name.startswith(".")]
        assert (ckpt / "state.bin").stat().st_size > TWO_GIB + (1 << 20)
        restored = run_python(HUGE, {"DET_RUNS_DIR": str(runs), "DET_RESUME": "1",
                                     "HUGE_DIGEST_OUT": str(tmp_path / "restored.json")},
                              timeout=300)
        assert restored.returncode == 0, restored.stderr[-3000:]
        a = json.loads((tmp_path / "saved.json").read_text())
        b = json.loads((tmp_path / "restored.json").read_text())
        assert a["shapes"][0] == [140_000_000, 4]
        assert a["tail_trained"]  # bytes past the first 2 GiB differ from the start values
        assert b["digests"] == a["digests"]
    finally:
        shutil.rmtree(runs, ignore_errors=True)
    assert not runs.exists()
