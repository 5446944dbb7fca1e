"""Issue 36: Keras scripts as keras-io writes them, on ``horovodrun -np 2`` against one process.

The shapes are tests/scripts/keras_io_shapes.py's. Before issue 36: a script shuffling with
``np.random.permutation`` before ``wrap_data`` gave each rank half of a different array
(overlapping shards, no error), each rank's BatchNormalization statistics drifted apart,
and a model building its layers in ``train_step`` was refused on two processes.

This module's other half, one process in-process: tests/integration/test_keras_io_shapes.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.e2e.test_horovod import HOROVODRUN, horovodrun
from tests.support import SCRIPTS, run_python

SCRIPT = SCRIPTS / "keras_io_shapes.py"
SERIAL = Path(__file__).with_name("_serial_runs.py")
ALL = "gan,shuffled,nocall,addloss"  # one_and_two's shapes
pytestmark = [pytest.mark.skipif(not HOROVODRUN.exists(), reason="horovodrun not installed"),
              # the first test holds the module fixtures' 2 launches (3 runs) too
              pytest.mark.timeout(600)]


def _run(tmp: Path, name: str, processes: int, shapes: str, **env: str):
    out = tmp / f"{name}.json"
    full = {"SHAPES": shapes, "SHAPES_OUT": str(out), "DET_RUNS_DIR": str(tmp / name), **env}
    proc = (horovodrun(SCRIPT, full, timeout=300) if processes > 1
            else run_python(SCRIPT, full, timeout=300))
    return proc, (json.loads(out.read_text()) if out.exists() else None)


@pytest.fixture(scope="module")
def two_launch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, int]:
    """One ``horovodrun -np 2`` of tests/e2e/_serial_runs.py (a launch of their own each
    cost ~6 s of CPU a process): the 2-process run of ``one_and_two`` (``n2``), the GAN
    stopped by SIGTERM (``stopped``: it ends with ``SystemExit(0)``, so the launch goes on;
    its resume is a fresh launch, in the test), then the unseeded arrays' (``unseeded``:
    last, since it fails the launch on purpose). Its folder, output and exit status; each
    run that ended well left ``<name><rank>.done``."""
    tmp = tmp_path_factory.mktemp("two")
    # no stdout files: what the scripts print stays the launch's (the tests read it there)
    spec = [{"script": str(SCRIPT), "stdout": None, "done": str(tmp / f"{name}{{rank}}.done"),
             "env": {"SHAPES": shapes, "SHAPES_OUT": str(tmp / f"{name}.json"),
                     "DET_RUNS_DIR": str(tmp / name), **env}}
            for name, shapes, env in (("n2", ALL, {}), ("stopped", "gan", {"SHAPES_STOP": "1,3"}),
                                      ("unseeded", "shuffled", {"SHAPES_UNSEEDED": "1"}))]
    (tmp / "spec.json").write_text(json.dumps(spec))
    proc = horovodrun(SERIAL, {"SERIAL_SPEC": str(tmp / "spec.json")}, timeout=500)
    return tmp, proc.stdout + proc.stderr, proc.returncode


@pytest.fixture(scope="module")
def one_and_two(tmp_path_factory: pytest.TempPathFactory,
                two_launch: tuple[Path, str, int]) -> tuple[dict, dict]:
    tmp = tmp_path_factory.mktemp("shapes")
    # the GAN first: its first model, as in a run of the GAN alone, so the 2-process run's
    # GAN is also the uninterrupted reference of the stop-and-resume test below
    proc, one = _run(tmp, "n1", 1, ALL)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
    two_dir, output, _ = two_launch
    for rank in (0, 1):  # n2 ended well on both processes
        assert (two_dir / f"n2{rank}.done").exists(), output[-7000:]
    return one, json.loads((two_dir / "n2.json").read_text())


def test_data_shuffled_with_numpy_before_wrap_data_is_sharded_disjointly(one_and_two) -> None:
    one, two = one_and_two
    assert two["size"] == 2
    ids = two["shuffled"]["ids"]
    assert sorted(ids[0] + ids[1]) == list(range(96))  # every row once: no overlap, none lost
    # the rows one process trains on (the first 75 % of the same shuffled array)
    assert sorted(one["shuffled"]["ids"][0]) == sorted(ids[0] + ids[1])


def test_batch_normalization_statistics_agree_across_ranks(one_and_two) -> None:
    _, two = one_and_two
    every = two["shuffled"]["moving_every"]
    for a, b in zip(every[0], every[1]):
        np.testing.assert_array_equal(a, b)  # averaged: one set of statistics
    for mean_or_var in every[0]:
        assert np.isfinite(mean_or_var).all()


def test_a_model_building_its_layers_in_train_step_trains_on_two_as_on_one(one_and_two) -> None:
    one, two = one_and_two
    for a, b in zip(one["nocall"]["weights"], two["nocall"]["weights"]):
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-6)
    for a, b in zip(one["gan"]["state"], two["gan"]["state"]):  # both optimizers averaged
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-6)


def test_without_batch_size_two_processes_step_by_keras_32_rows_in_all(one_and_two) -> None:
    one, two = one_and_two  # 16 rows each on 2: the steps of one process's 32
    for a, b in zip(one["addloss"]["weights"], two["addloss"]["weights"]):
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-6)


def test_arrays_that_differ_between_ranks_are_refused_naming_the_fix(
        two_launch: tuple[Path, str, int]) -> None:
    two_dir, text, returncode = two_launch
    out = two_dir / "unseeded.json"
    assert returncode != 0 and not out.exists()
    assert not (two_dir / "unseeded0.done").exists()
    assert "wrap_data: x differs between the 2 processes" in text
    assert "seeded generator" in text


def test_a_gan_stopped_on_an_epochs_last_batch_resumes_both_optimizers_on_two(
        one_and_two, two_launch: tuple[Path, str, int]) -> None:
    _, whole = one_and_two  # uninterrupted: its GAN ran first, as the GAN alone runs here
    two_dir, text, _ = two_launch  # the stop: a run of the launch, after n2 (exit 0 on both)
    for rank in (0, 1):
        assert (two_dir / f"stopped{rank}.done").exists(), text[-7000:]
    assert not (two_dir / "stopped.json").exists()  # it ended in fit: no report
    assert "stopped by SIGTERM at epoch 2, batch 0" in text  # after epoch 1's end
    # the resume: a fresh launch (as a user's rerun), from the stopped run's checkpoint
    proc, resumed = _run(two_dir, "stopped", 2, "gan", DET_RESUME="latest")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
    assert resumed["gan"]["d_loss"] == whole["gan"]["d_loss"]
    for a, b in zip(whole["gan"]["state"], resumed["gan"]["state"]):
        np.testing.assert_array_equal(a, b)  # weights and both optimizers' slots
