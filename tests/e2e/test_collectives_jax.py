"""JAX's processes joined by det_sdk.collectives.jax (issue 57): two real processes under a
real launcher, each building ``JaxDistributed.from_env()`` (tests/scripts/jax_ranks.py).

- under ``torchrun --standalone`` (the ranks meet in torchrun's agent's store) and under
  ``horovodrun --gloo`` (in horovodrun's HTTP rendezvous store): ranks, det.core's object
  collectives and one ``jax.jit`` over an array sharded across both processes;
- a rank that never arrives (it exits before building anything) makes the other fail within
  the bound (``DET_JAX_TIMEOUT=5``), saying which rank and what to check, never hang:
  rank 1 missing (rank 0 waits at its star), and rank 0 missing (rank 1 waits at the store).
"""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest

from tests.support import HOROVODRUN, REPO, SCRIPTS, TORCHRUN, launched_env, launcher_argv

pytest.importorskip("jax")
SCRIPT = SCRIPTS / "jax_ranks.py"
BOUND_S = 5  # DET_JAX_TIMEOUT of the failure runs


def _skip_without(launcher: str) -> None:
    path = HOROVODRUN if launcher == "horovodrun" else TORCHRUN
    if not path.exists():
        pytest.skip(f"{launcher} not installed")
    if launcher == "torchrun":
        pytest.importorskip("torch")


@pytest.mark.parametrize("launcher", ["torchrun", "horovodrun"])
def test_two_processes_meet_in_jax_and_in_det_cores_collectives(launcher: str) -> None:
    _skip_without(launcher)
    proc = subprocess.run(launcher_argv(launcher, SCRIPT), env=launched_env(), cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    rows = sorted((json.loads(m) for m in re.findall(r"JAX_RANKS (\{.*\})", out)),
                  key=lambda row: row["rank"])
    assert [r["rank"] for r in rows] == [0, 1], out[-4000:]
    for r in rows:
        assert (r["size"], r["local_rank"], r["process_index"], r["process_count"]) == (
            2, r["rank"], r["rank"], 2)
        # every process sees both processes' devices; the array spans them: 3 values each
        assert r["devices"] == 2 * r["local_devices"]
        assert r["global_shape"] == [6 * r["local_devices"]]
        assert r["total"] == 3.0 * r["local_devices"] * (1 + 2)  # rank 0's ones, rank 1's twos
        assert r["gathered_ranks"] == [0, 1] and r["distinct_pids"] == 2
        assert (r["broadcast"], r["broadcast_1"], r["any"]) == (
            "from rank 0", "from rank 1", True)
        assert r["cpu_collectives"] == "gloo"
        assert r["repr"] == (f"JaxDistributed(rank={r['rank']}, size=2, "
                             f"coordinator={r['coordinator']!r})")
        # torch only for torchrun's store; TensorFlow never
        assert r["torch_loaded"] is (launcher == "torchrun") and not r["tensorflow_loaded"]
    assert rows[0]["coordinator"] == rows[1]["coordinator"]
    assert re.fullmatch(r"127\.0\.0\.1:\d+", rows[0]["coordinator"])  # one host: loopback
    # close() left JAX's runtime on both
    assert len(re.findall(r"closed, jax.distributed initialized: False", out)) == 2, out[-3000:]


def test_a_rank_that_never_arrives_fails_the_other_within_the_bound() -> None:
    """Both directions at once (two torchruns, mostly waiting): rank 1 gone (rank 0 waits for
    it at the star) and rank 0 gone (rank 1 waits for its address in torchrun's store)."""
    _skip_without("torchrun")
    runs = {}
    start = time.monotonic()
    for gone in (1, 0):
        env = launched_env(DET_JAX_TIMEOUT=str(BOUND_S), JAX_RANKS_EXIT_RANK=str(gone))
        runs[gone] = subprocess.Popen(launcher_argv("torchrun", SCRIPT), env=env, cwd=REPO,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True)
    outs, took = {}, {}
    try:
        for gone, proc in runs.items():
            outs[gone] = proc.communicate(timeout=90)[0]  # start-up + the bound, with room
            took[gone] = time.monotonic() - start
    finally:
        for proc in runs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for gone, proc in runs.items():
        assert proc.returncode != 0, outs[gone][-3000:]
        assert f"rank {gone}: leaving before JaxDistributed" in outs[gone]
        assert "DistributedSetupError" in outs[gone], outs[gone][-3000:]
        assert "JAX_RANKS" not in outs[gone]
        # the bound held, with room for two launchers' and the imports' start on 2 cores
        assert took[gone] < BOUND_S + 40, (gone, took[gone])
    assert re.search(rf"rank 0 waited {BOUND_S} s\): 1 of 1 other ranks did not connect .* "
                     rf"within {BOUND_S} s \(missing: rank 1\)\. Check that every rank's "
                     r"process started", outs[1]), outs[1][-3000:]
    assert re.search(rf"rank 0 never published its address .* within {BOUND_S} s: rank 0 "
                     r"did not arrive\. Check that every rank's process started", outs[0]), \
        outs[0][-3000:]
