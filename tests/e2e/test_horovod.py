"""Data-parallel training under a real `horovodrun -np 2` (Gloo, this host, CPU).

Each test launches the processes as a user would; the scripts in tests/scripts do
the work and rank 0 writes what it found. The runs that need no launch of their own
(references, hvd_check's ``report``) share one (``launches``), of the
user's own ``horovodrun`` binary; the others, and the other modules' N-process runs, go
through det_sdk.launch.horovodrun (tests.support.HOROVOD_LAUNCH: the same launcher code, the
master's way, without the probe that imports TensorFlow in a forked process on every launch).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from det_sdk.env import outside
from tests.support import HOROVOD_LAUNCH, REPO, SCRIPTS, run_python

HOROVODRUN = Path(sys.executable).with_name("horovodrun")
pytestmark = [pytest.mark.skipif(not HOROVODRUN.exists(), reason="horovodrun not installed"),
              # whichever test asks first for ``launches`` runs them in its own time
              pytest.mark.timeout(900)]


def horovodrun(script: Path, env: dict[str, str], np_: int = 2, timeout: float = 240,
               launcher: list[str] | None = None):
    """``script`` on ``np_`` processes under ``launcher`` (default HOROVOD_LAUNCH)."""
    # Horovod's background thread wakes every HOROVOD_CYCLE_TIME ms to look for tensors:
    # at its default of 1 ms an idle rank (waiting while the other writes a checkpoint)
    # spends 16-18% of a core polling, at 5 ms 6-8%; two test_horovod tests took 7% less
    # CPU with it (149.7 -> 139.3 and 154 -> 144 s, docs/benchmarks.md). It sets only
    # when the thread looks, not what any collective computes (Gloo's sum of 2 ranks is
    # the same in any fused buffer)
    full_env = outside(keep=["DET_RUNS_DIR"], TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1",
                       **{"HOROVOD_CYCLE_TIME": "5", **env})
    return subprocess.run(
        [*(launcher or HOROVOD_LAUNCH), "-np", str(np_), "--gloo", sys.executable, str(script)],
        env=full_env, cwd=REPO, timeout=timeout, capture_output=True, text=True,
    )


def run_for_json(script: Path, env: dict[str, str], out: Path, processes: int,
                 timeout: float = 300) -> dict:
    """Run ``script`` as one process or under ``horovodrun -np processes``; the JSON it
    wrote to ``out`` (its environment names where)."""
    proc = horovodrun(script, env, processes, timeout) if processes > 1 else run_python(
        script, env, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return json.loads(out.read_text())


SERIAL = Path(__file__).with_name("_serial_runs.py")
#: ``launches``: its folder, the 2-process launch's output and its exit status
Launches = tuple[Path, str, int]


@pytest.fixture(scope="module")
def launches(tmp_path_factory: pytest.TempPathFactory) -> Launches:
    """The module's runs that need no launch of their own (each launch cost ~6 s of CPU a
    process), in two launches of tests/e2e/_serial_runs.py, one run after another:

    * the user's own ``horovodrun -np 2`` binary: the uninterrupted tiny_train.py
      (``full/``, the pause test's reference) and callbacks_train.py (``cb_full/``),
      first, as a fresh process runs them; tiny_train.py without dropout (``two/``);
      gan_train.py (``gan2/``); hvd_check.py (``hvd/``, ``report``'s). Not hvd_guard.py
      (``guarded``): after these runs, its XLA case logged no "XLA (jit_compile) turned
      off" (seen 2026-11-29, not explained yet), so it keeps a launch of its own;
    * one process: tiny_train.py without dropout (``one/``) and gan_train.py (``gan1/``).

    Its folder, the 2-process launch's output and exit status (the 1-process launch's
    output is in ``one.failed`` where it failed). Each run that ended well left
    ``out<rank>.done`` in its folder."""
    d = tmp_path_factory.mktemp("launches")
    tiny = str(SCRIPTS / "tiny_train.py")

    def run(name: str, script: str, **env: str) -> dict:
        # no stdout files: what the runs print stays in the launch's output, as it was
        (d / name).mkdir()
        return {"script": script, "stdout": None, "done": str(d / name / "out{rank}.done"),
                "env": {"DET_RUNS_DIR": str(d / name / "runs"), **env}}

    two = [
        run("full", tiny, TINY_WEIGHTS_OUT=str(d / "full" / "w.npz")),
        run("cb_full", str(SCRIPTS / "callbacks_train.py"), CB_OUT=str(d / "cb_full")),
        run("two", tiny, TINY_DROPOUT="0", TINY_HISTORY_OUT=str(d / "two" / "h.json")),
        run("gan2", str(SCRIPTS / "gan_train.py"), GAN_OUT=str(d / "gan2" / "out.json")),
        run("hvd", str(SCRIPTS / "hvd_check.py"), HVD_OUT=str(d / "hvd" / "out.json"))]
    one = [run("one", tiny, TINY_DROPOUT="0", TINY_HISTORY_OUT=str(d / "one" / "h.json")),
           run("gan1", str(SCRIPTS / "gan_train.py"), GAN_OUT=str(d / "gan1" / "out.json"))]
    (d / "two.json").write_text(json.dumps(two))
    (d / "one.json").write_text(json.dumps(one))
    # the bound: the work of 7 launches that had 240 s each (a hang ends in TimeoutExpired)
    proc = horovodrun(SERIAL, {"SERIAL_SPEC": str(d / "two.json")}, timeout=600,
                      launcher=[str(HOROVODRUN)])  # the user's own `horovodrun` binary
    single = run_python(SERIAL, {"SERIAL_SPEC": str(d / "one.json")}, timeout=600)
    if single.returncode:
        (d / "one.failed").write_text(single.stdout[-3000:] + single.stderr[-3000:])
    return d, proc.stdout + proc.stderr, proc.returncode


def _ended_well(launches: Launches, name: str, ranks: int = 2) -> Path:
    """``launches``' run ``name``'s folder, once each of its ``ranks`` processes ended it
    well (returned, or exited 0)."""
    d, output, _ = launches
    failed = d / "one.failed"
    for rank in range(ranks):
        assert (d / name / f"out{rank}.done").exists(), (
            failed.read_text() if ranks == 1 and failed.exists() else output[-6000:])
    return d / name


@pytest.fixture(scope="module")
def report(launches: Launches) -> dict:
    return json.loads((_ended_well(launches, "hvd") / "out.json").read_text())


def test_two_processes_shard_the_data(report: dict) -> None:
    assert report["size"] == 2
    assert sorted(report["shard_rows"]) == [101, 102]  # 203 rows, contiguous halves


def test_weights_start_apart_and_end_identical(report: dict) -> None:
    # the script makes rank 1's initial weights differ; fit broadcasts rank 0's
    a, b = report["initial_checksums"]
    assert a != b
    for kind in ("numpy", "sequence", "dataset", "lazy"):  # lazy: Sequential, no input shape
        a, b = report[f"{kind}_final_checksums"]
        assert a == b, kind


@pytest.mark.parametrize("kind", ["numpy", "sequence", "dataset"])
def test_every_sample_once_per_epoch(report: dict, kind: str) -> None:
    assert report[f"{kind}_seen_count"] == 203
    assert report[f"{kind}_seen_sorted_equals_all"]


def test_predict_gathers_rows_in_order(report: dict) -> None:
    assert report["predict_wrapped_equal"]
    assert report["predict_unwrapped_rows"] == 203  # full data is not predicted twice
    assert report["predict_unwrapped_equal"]
    assert report["predict_sequence_equal"]
    # input neither wrapped nor numpy: each row once on every process, not once per process
    assert report["predict_tensor_rows"] == [1] * report["size"]
    assert report["predict_tensor_equal"]
    assert report["predict_dataset_rows"] == [203] * report["size"]
    assert report["predict_dataset_equal"]
    assert report["predict_chief_only"] == [False, True]  # rank 1 gets None


def test_fp16_compression_keeps_the_ranks_identical_and_close_to_uncompressed(
        report: dict) -> None:
    for name in ("none", "fp16"):
        first, *others = report[f"compression_{name}_checksums"]
        assert all(c == first for c in others), name
    # float16's 11-bit mantissa: close to the uncompressed run after an epoch, not equal
    assert 0 < report["compression_fp16_gap"] < 1e-2


def test_alike_rows_take_the_plain_average_and_uneven_rows_the_weighted_one(
        report: dict) -> None:
    # the weighting's two passes over the gradients run only where the processes' rows
    # differ (issue 56 item 9), from SKIP_WEIGHTING_FROM gradient values; a smaller step
    # keeps them rather than ask (one more collective); alike rows weighted have other bits
    for size in ("large", "small"):
        assert report[f"average_{size}_weighted_bits_differ"], size
        assert report[f"average_{size}_none_stays"], size
        assert report[f"average_{size}_uneven_is_weighted"], size
    assert report["average_large_alike_is_plain"]
    assert report["average_small_alike_is_weighted"]


def test_evaluate_equals_one_process_on_all_data(report: dict) -> None:
    np.testing.assert_allclose(report["evaluate"], report["evaluate_reference"], rtol=1e-6)


def test_loss_curve_matches_one_process(launches: Launches) -> None:
    """Global batch 16 on 2 processes (8 each) vs 16 on one: the same updates.

    Without dropout, the only differences are float summation order in the averaged
    gradients and metrics, and the last batch of each epoch (200 % 16 = 8 rows, 4
    per process: even, so also the same). Tolerance: 1e-4 relative over 4 epochs.
    """
    h1 = json.loads((_ended_well(launches, "one", 1) / "h.json").read_text())
    h2 = json.loads((_ended_well(launches, "two") / "h.json").read_text())
    for key in ("loss", "val_loss", "accuracy", "val_accuracy"):
        np.testing.assert_allclose(h2[key], h1[key], rtol=1e-4, err_msg=key)
    assert h1["loss"][-1] < h1["loss"][0]  # it did learn


def test_pause_at_epoch_boundary_resumes_exactly(tmp_path: Path, launches: Launches) -> None:
    """SIGTERM reaches rank 0 only; both stop together, one checkpoint, exact resume."""
    full_npz = _ended_well(launches, "full") / "w.npz"  # uninterrupted

    runs = str(tmp_path / "paused")
    stopped = horovodrun(SCRIPTS / "tiny_train.py", {
        "DET_RUNS_DIR": runs, "TINY_STOP_AT": "1", "TINY_STOP_RANK": "0"})
    assert stopped.returncode == 0, stopped.stdout[-3000:] + stopped.stderr[-3000:]
    assert "stopped by SIGTERM at epoch 2, batch 0" in stopped.stdout + stopped.stderr
    rows = [json.loads(line) for line in
            (Path(runs) / "1" / "checkpoints.jsonl").read_text().splitlines()]
    assert [(r["epoch"], r["batch"]) for r in rows] == [(1, 0), (2, 0)]  # written once each

    resumed = horovodrun(SCRIPTS / "tiny_train.py", {
        "DET_RUNS_DIR": runs, "DET_RESUME": "1", "TINY_WEIGHTS_OUT": str(tmp_path / "r.npz")})
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    a, b = np.load(full_npz), np.load(tmp_path / "r.npz")
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_gan_with_two_wrapped_optimizers_averages_exactly(launches: Launches) -> None:
    """A custom train_step applying two wrapped optimizers (Adam; SGD with momentum):
    2 processes end bit-identical and follow 1 process's loss curve at the same
    global batch (Horovod's own optimizer averages nothing here on Keras 3, and
    nothing on Keras 2 either, since it averages only inside minimize)."""
    one = json.loads((_ended_well(launches, "gan1", 1) / "out.json").read_text())
    two = json.loads((_ended_well(launches, "gan2") / "out.json").read_text())
    assert two["processes"] == 2 and two["ranks_identical"]
    for key in ("d_loss", "g_loss", "val_d_loss"):
        np.testing.assert_allclose(two["history"][key], one["history"][key], rtol=1e-4,
                                   err_msg=key)
    assert one["history"]["d_loss"][-1] != one["history"]["d_loss"][0]  # it trained


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str, int]:
    """One ``horovodrun -np 2`` of hvd_guard.py's three cases in turn (fresh models, one
    run), then rank 1 raising while rank 0 trains: what rank 0 recorded per case, the
    run's output and its exit status. A hang would end in TimeoutExpired, not a result."""
    d = tmp_path_factory.mktemp("guard")
    # the default bound (240 s): the work of 4 runs that had 120 s each
    proc = horovodrun(SCRIPTS / "hvd_guard.py", {
        "GUARD_CASE": "unwrapped,xla,float8,bypass", "GUARD_THEN_RANK_FAILS": "1",
        "GUARD_OUT": str(d / "out.json"), "DET_RUNS_DIR": str(d / "runs")})
    output = proc.stdout + proc.stderr
    assert (d / "out.json").exists(), output[-3000:]
    return json.loads((d / "out.json").read_text()), output, proc.returncode


def test_a_failing_rank_fails_the_run_without_hanging(guarded: tuple[dict, str, int]) -> None:
    _, output, returncode = guarded
    assert returncode != 0
    assert "boom on rank 1" in output


def test_xla_asked_for_is_turned_off_with_a_message(guarded: tuple[dict, str, int]) -> None:
    cases, output, _ = guarded
    assert cases["xla"]["trained"] and cases["xla"]["error"] is None
    assert "XLA (jit_compile) turned off" in output  # only this case compiled with XLA
    assert "xla: trained to the end" in output


@pytest.mark.parametrize(("case", "message"), [
    ("unwrapped", r"compiled with an optimizer \(Adam\) that context.wrap_optimizer did not "
                  r"wrap"),
    ("bypass", r"after step 1 \(the first of this fit\), the 2 processes hold different "
               r"weights"),
])
def test_training_that_would_diverge_stops_with_what_to_change(
        guarded: tuple[dict, str, int], case: str, message: str) -> None:
    cases, output, _ = guarded
    error = cases[case]["error"]
    assert error is not None and not cases[case]["trained"], cases[case]
    assert re.search(message, error), error
    assert "context.wrap_optimizer" in error
    assert re.search(message, output), output[-3000:]  # the user sees it
    assert f"{case}: trained to the end" not in output


def test_one_collective_more_on_one_rank_is_named_not_paired(tmp_path: Path) -> None:
    """Rank 1 calls one allgather more than rank 0, before its fit: it meets rank 0's first
    collective in the fit (Horovod pairs them, whatever their names) and exchanged the
    wrong objects, silently; both ranks now stop there, naming each one's caller. Its own
    run: after it the processes' collectives are out of step by design."""
    proc = horovodrun(SCRIPTS / "hvd_guard.py", {
        "GUARD_CASE": "extra", "GUARD_OUT": str(tmp_path / "out.json"),
        "DET_RUNS_DIR": str(tmp_path / "runs"), "DET_COLLECTIVE_TIMEOUT": "60"}, timeout=200)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and (tmp_path / "out.json").exists(), output[-3000:]
    error = json.loads((tmp_path / "out.json").read_text())["extra"]["error"]
    assert error is not None and error.startswith("CollectiveMismatchError"), error
    assert re.search(r"rank 0 from det_sdk's \S+ \(\S+\.py\); rank 1 from the script", error)
    assert re.search(r"\[1\].*CollectiveMismatchError.*rank 1 from the script", output)
    assert "extra: trained to the end" not in output


def test_float8_training_is_refused_naming_its_overwritten_variables(
        guarded: tuple[dict, str, int]) -> None:
    cases, output, _ = guarded
    if not cases["float8"]["quantized"]:  # Keras 2: no float8, the case trains
        assert cases["float8"]["trained"], cases["float8"]
        return
    error = cases["float8"]["error"]
    assert error is not None and not cases["float8"]["trained"], cases["float8"]
    assert re.search(r"variables of the model \(dense_\d+/inputs_scale, ", error), error
    assert 'overwritten by their gradient (float8 training: model.quantize("float8"))' in error
    assert "Train the float8 model on one process" in output  # the user sees it


def test_callbacks_state_resumes_on_two_processes(tmp_path: Path, launches: Launches) -> None:
    """EarlyStopping, ModelCheckpoint, ReduceLROnPlateau, CSVLogger and a user's callback
    (get_state/set_state) on 2 processes: interrupted and resumed, rank 0's checkpointed
    state is restored on both ranks; the run equals an uninterrupted one."""
    script = SCRIPTS / "callbacks_train.py"
    full_out = _ended_well(launches, "cb_full")  # uninterrupted
    cut_out = tmp_path / "cut"
    cut_out.mkdir()
    expected = json.loads((full_out / "rank0.json").read_text())
    n = len(expected["epochs"])
    assert 3 <= n < 40  # EarlyStopping ended it: its state matters across the resume

    env = {"DET_RUNS_DIR": str(cut_out / "runs"), "CB_OUT": str(cut_out)}
    cut = horovodrun(script, {**env, "CB_INTERRUPT_AT": str(n - 1)})
    assert cut.returncode != 0 and "interrupted after epoch" in cut.stdout + cut.stderr
    resumed = horovodrun(script, {**env, "DET_RESUME": "1"})
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    for r in (0, 1):
        assert json.loads((cut_out / f"rank{r}.json").read_text()) == expected
        a, b = np.load(full_out / "rank0.npz"), np.load(cut_out / f"rank{r}.npz")
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
    assert (cut_out / "log.csv").read_text() == (full_out / "log.csv").read_text()
