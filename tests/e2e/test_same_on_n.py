"""Issue 10: a script that trains on one process trains the same on N (`horovodrun -np 2`).

tests/scripts/hvd_same_on_n.py runs each case once under 2 processes and once as one
process (the reference); the tests read its JSON reports. Cases that need no second
process (checkpoint weights into a subclassed model, run ids, retention, stopping
before fit, resuming random draws) run here or as one script.

Issue 49 adds one section to the same run (no new process): rows cut from wrapped views
and an unwrapped dataset alike on every process are refused, and preprocessing adapted on
wrapped data equals one process's.

This module's other half, the tests that start no process: tests/integration/test_same_on_n.py.

Each process that imports TensorFlow costs ~6 s of CPU before it trains: the one-process
reference and the two stops before fit (tests/scripts/stop_before_fit.py) share one
process (tests/e2e/_serial_runs.py), as ``one_process`` says.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.e2e.test_horovod import HOROVODRUN, run_for_json
from tests.support import SCRIPTS, run_python

SCRIPT = SCRIPTS / "hvd_same_on_n.py"
STOP = SCRIPTS / "stop_before_fit.py"
SERIAL = Path(__file__).with_name("_serial_runs.py")
N = 33


def _env(tmp: Path) -> dict[str, str]:
    return {"SAME_DIR": str(tmp), "SAME_OUT": str(tmp / "out.json"),
            "DET_RUNS_DIR": str(tmp / "runs")}


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> dict:
    if not HOROVODRUN.exists():
        pytest.skip("horovodrun not installed")
    tmp = tmp_path_factory.mktemp("two")
    return run_for_json(SCRIPT, _env(tmp), tmp / "out.json", 2)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory: pytest.TempPathFactory) -> tuple[
        Path, subprocess.CompletedProcess[str]]:
    """One process running, one after another: stop_before_fit.py stopped by SIGTERM
    (``TERM/``; first, as a fresh process runs it; it ends with ``SystemExit(0)``, so the
    process goes on), the one-process reference (``same/``: only the sections the tests
    compare with it, ``SAME_REFERENCE=1``), then stop_before_fit.py stopped by SIGINT
    (``INT/``; last: its ``SystemExit(130)`` ends the process). Each run's standard output
    is ``<name>.out``; each that ended well (exit 0) left ``<name>.out.done``. The folder
    and the process."""
    tmp = tmp_path_factory.mktemp("one")
    spec = [{"script": str(STOP), "stdout": str(tmp / f"{sig}.out"),
             "env": {"DET_RUNS_DIR": str(tmp / sig), "STOP_SIGNAL": sig}}
            for sig in ("TERM", "INT")]
    spec.insert(1, {"script": str(SCRIPT), "stdout": str(tmp / "same.out"),
                    "env": {**_env(tmp / "same"), "SAME_REFERENCE": "1"}})
    for name in ("TERM", "INT", "same"):
        (tmp / name).mkdir()
    (tmp / "spec.json").write_text(json.dumps(spec))
    return tmp, run_python(SERIAL, {"SERIAL_SPEC": str(tmp / "spec.json")}, timeout=300)


@pytest.fixture(scope="module")
def one(one_process: tuple[Path, subprocess.CompletedProcess[str]]) -> dict:
    tmp, proc = one_process
    assert (tmp / "same.out.done").exists(), proc.stdout[-4000:] + proc.stderr[-4000:]
    return json.loads((tmp / "same" / "out.json").read_text())


def test_arrays_derived_from_wrapped_views_train_every_sample_once(two: dict) -> None:
    # 16 and 17 rows per process: 4 and 5 batches, padded to 5 (was refused: "rank 0: 4,
    # rank 1: 5 steps")
    assert two["size"] == 2
    assert two["derived_seen"] == list(range(N))
    a, b = two["derived_checksums"]
    assert a == b


@pytest.mark.parametrize("case", ["shuffled_seeded", "shuffled_unseeded"])
def test_a_dataset_shuffled_before_wrap_data_gives_disjoint_shards(two: dict, case: str) -> None:
    # two epochs of 32 samples: each exactly twice (processes shuffled alike, then shard)
    assert two[f"{case}_seen"] == sorted(list(range(32)) * 2)


@pytest.mark.parametrize("case", ["uneven", "uneven_steps"])
def test_a_wrapped_dataset_with_uneven_batches_is_padded_not_refused(two: dict,
                                                                      case: str) -> None:
    # 9 batches shard into 5 and 4; with steps_per_epoch=5 rank 1 used to run dry and hang
    assert two[f"{case}_seen"] == list(range(N))
    a, b = two[f"{case}_checksums"]
    assert a == b


@pytest.mark.parametrize("kind", ["dataset", "sequence", "whole_sequence"])
def test_evaluate_on_datasets_and_sequences_equals_one_process(two: dict, kind: str) -> None:
    np.testing.assert_allclose(two[f"evaluate_{kind}"], two["evaluate_reference"], rtol=1e-6)


def test_class_weight_with_numpy_trains_as_one_process(two: dict, one: dict) -> None:
    np.testing.assert_allclose(two["class_weight_loss"], one["class_weight_loss"], rtol=1e-4)
    np.testing.assert_allclose(two["class_weight_checksums"][0],
                               one["class_weight_checksums"][0], rtol=1e-4)
    a, b = two["class_weight_checksums"]
    assert a == b


def test_metrics_are_the_whole_datas_not_a_mean_of_processes(two: dict, one: dict) -> None:
    # confusion counts add up to the data (were averaged: half of it), padding not counted
    assert two["train_count_sums"] == [N, N] == one["train_count_sums"]
    assert two["val_count_sums"] == [25, 25]
    for key in ("auc", "precision", "tp"):
        np.testing.assert_allclose(two["val_last"][key], two["val_reference"][key], rtol=1e-6)
    for key, ref in two["evaluate_metrics_reference"].items():
        np.testing.assert_allclose(two["evaluate_metrics"][key], ref, rtol=1e-6, err_msg=key)


def test_lookup_and_normalization_layers_are_broadcast_and_checkpointed(two: dict) -> None:
    a, b = two["lookup_vocabularies"]
    assert a == b and len(a) == 4  # rank 1 adapted other words: rank 0's table everywhere
    pa, pb = two["lookup_predictions"]
    assert pa == pb  # Normalization adapted on other data too: rank 0's mean, re-derived
    assert two["lookup_loaded_equal"]
    assert two["lookup_loaded_vocabulary"] == a


def test_callbacks_that_write_files_run_on_rank_0_only(two: dict) -> None:
    assert two["csv_ranks"] == ["0"]
    assert two["plain_ranks"] == ["0", "1"]


def test_trial_id_is_the_run_id_on_every_process(two: dict) -> None:
    assert two["rank_trial_ids"] == [1, 1]


def test_rows_cut_from_wrapped_views_and_alike_datasets_are_refused(two: dict,
                                                                    one: dict) -> None:
    # issue 49: each process would validate its own part's first 16 rows (32 in all)
    assert "rows cut from context.wrap_data's arrays ([:16])" in two["cut_validation_refused"]
    assert "before wrap_data" in two["cut_validation_refused"]
    assert "the same batches" in two["unwrapped_dataset_refused"]
    assert one["cut_validation_refused"] is None  # one process: what the script means
    assert one["unwrapped_dataset_refused"] is None


def test_plain_arrays_alike_on_every_process_train_what_one_process_does(two: dict,
                                                                          one: dict) -> None:
    # issue 49, item 7: each process trained every sample (32 ids twice) before
    assert two["plain_arrays_seen"] == one["plain_arrays_seen"] == list(range(32))
    for got, want in zip(two["plain_arrays_weights"], one["plain_arrays_weights"]):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_preprocessing_adapted_on_wrapped_data_equals_one_process(two: dict, one: dict) -> None:
    # issue 49: was each rank's half, then rank 0's broadcast
    reference = one["adapted"][0]
    for rank_state in two["adapted"]:
        for got, want in zip(rank_state, reference):
            np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(two["adapted_val_loss"], one["adapted_val_loss"], rtol=1e-5)


def test_preprocessing_adapted_on_shard_batched_data_sees_the_global_batches(
        two: dict, one: dict) -> None:
    # issue 56: batch(shard_batch_size(32)) gave adapt batches of 16 on 2 processes;
    # Discretization's boundaries and Normalization's moments depend on the batches
    (reference,) = one["adapted_batched"]
    for rank_state in two["adapted_batched"]:
        for got, want in zip(rank_state, reference):
            np.testing.assert_allclose(got, want, rtol=1e-6)


# stack-neutral: before fit, det_sdk.keras._policy's handler (no Keras code) ends the run
@pytest.mark.stack_neutral
@pytest.mark.parametrize(("sig", "code"), [("TERM", 0), ("INT", 130)])
def test_a_signal_before_fit_exits_cleanly_and_leaves_no_run(
        one_process: tuple[Path, subprocess.CompletedProcess[str]], sig: str,
        code: int) -> None:
    tmp, proc = one_process
    if code == 0:  # SystemExit(0) (or None): the run ended well, the process went on
        assert (tmp / f"{sig}.out.done").exists(), proc.stderr[-3000:]
    else:  # the process's last run: its exit status is the process's
        assert proc.returncode == code and not (tmp / f"{sig}.out.done").exists(), (
            proc.stderr[-3000:])
    stdout = (tmp / f"{sig}.out").read_text()
    assert "run 1" in stdout and "not reached" not in stdout
    assert f"stopped by SIG{sig} before training; run 1 removed" in proc.stderr
    assert not (tmp / sig / "1").exists()


def test_a_position_embeddings_sparse_rows_train_as_on_one_process(two: dict, one: dict) -> None:
    # 5.3e-03 apart (max abs) before the rows were summed back per position (Keras 3, Adam)
    for got, want in zip(two["positions_weights"], one["positions_weights"], strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_an_uneven_last_global_batch_trains_as_on_one_process(two: dict, one: dict) -> None:
    # issue 56 (FeatureSpace's 242 rows): 4 rows on one process and 2 on the other at the
    # last step; 0.027 apart (max abs) when each process's mean weighed the same
    for got, want in zip(two["uneven_last_batch_weights"], one["uneven_last_batch_weights"],
                         strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
