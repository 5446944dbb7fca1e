"""Local runs end to end: the example, and interrupt (SIGTERM, SIGINT) and resume.

Training scripts run as real processes (a real SIGTERM must reach them); this process
imports no TensorFlow.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests.support import REPO, SCRIPTS, run_python

TINY = SCRIPTS / "tiny_train.py"
SERIAL = Path(__file__).with_name("_serial_runs.py")


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory, mnist_npz: Path
            ) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One local run of examples/train.py, read by the two example tests: the process and
    its runs directory.

    Its const.yaml is the shipped one's, written as issue 23's proposal writes numbers
    (YAML 1.2 floats ``.5`` and ``1e-1``: under YAML 1.1 they were strings, and SGD
    refused them; the values are the shipped 0.5 and 0.1), with a seed, an
    ``environment.image`` and ``environment_variables`` (MNIST_NPZ from the config, the
    shell not setting it; EPOCHS=3 there, which the shell's EPOCHS=2 overrides). With a
    random seed some runs end two epochs near chance (seed 1986611620: 0.1875, the same
    on the code before this round's changes), which says nothing about det_sdk. Seed 1:
    0.61 on Keras 3, 0.45 on Keras 2."""
    tmp = tmp_path_factory.mktemp("example")
    model_dir = tmp / "model"
    model_dir.mkdir()
    shutil.copy(REPO / "examples" / "train.py", model_dir / "train.py")
    shipped = (REPO / "examples" / "const.yaml").read_text()
    assert "    dropout: 0.5\n" in shipped and "    learning_rate: 0.1\n" in shipped
    (model_dir / "const.yaml").write_text(
        shipped.replace("    dropout: 0.5\n", "    dropout: .5\n")
        .replace("    learning_rate: 0.1\n", "    learning_rate: 1e-1\n")
        + textwrap.dedent(f"""\
            environment:
                image: determinedai/environments:tf
                environment_variables:
                    - MNIST_NPZ={mnist_npz}
                    - EPOCHS=3
            reproducibility:
                experiment_seed: 1
        """))
    runs = tmp / "runs"
    assert "MNIST_NPZ" not in os.environ
    proc = run_python(model_dir / "train.py", {"EPOCHS": "2", "DET_RUNS_DIR": str(runs)},
                      cwd=tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, runs


def test_example_trains_locally_and_records(
        example: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, runs = example
    acc = float(re.search(r"Test accuracy: ([\d.]+)", proc.stdout).group(1))
    assert acc > 0.2  # ten classes: twice chance after two epochs

    run = runs / "1"
    metrics = _jsonl(run / "metrics.jsonl")
    assert [(m["group"], m["epoch"]) for m in metrics] == [
        ("training", 1), ("validation", 1), ("training", 2), ("validation", 2)
    ]
    assert {"loss", "accuracy"} <= set(metrics[0]["metrics"])
    assert {"val_loss", "val_accuracy"} <= set(metrics[1]["metrics"])
    assert metrics[-1]["steps_completed"] == 2 * 4  # 512 samples / batch 128, two epochs

    checkpoints = _jsonl(run / "checkpoints.jsonl")
    assert [c["epoch"] for c in checkpoints] == [1, 2]
    # retention (latest and best by default) deletes the others' directories; rows stay
    kept = [c for c in checkpoints if (run / "checkpoints" / c["uuid"]).is_dir()]
    assert kept[-1] == checkpoints[-1]
    for c in kept:
        ckpt = run / "checkpoints" / c["uuid"]
        meta = json.loads((ckpt / "metadata.json").read_text())
        assert meta["hparams"]["dropout"] == 0.5 and meta["seed"] == json.loads(
            (run / "run.json").read_text())["seed"]
        # the stack that trained it, recorded (loading under the other Keras is refused)
        assert meta["framework"]["tensorflow"] == importlib.metadata.version(
            "tensorflow-cpu") and meta["keras_major"] in (2, 3)
        assert meta["framework"]["keras"].split(".")[0] == str(meta["keras_major"])
    assert _tensorboard_scalars(run / "tensorboard" / "validation", "loss") == [
        (m["steps_completed"], pytest.approx(m["metrics"]["val_loss"], rel=1e-6))
        for m in metrics if m["group"] == "validation"]
    assert not list((run / "checkpoints").glob(".tmp-*"))


def _tensorboard_scalars(logdir: Path, tag: str) -> list[tuple[int, float]]:
    """(step, value) of every ``tag`` scalar in a directory's event files, as TensorBoard
    reads them where TensorFlow is not installed: its own TFRecord reader (both CRCs
    checked) and protocol buffers (importing TensorFlow here cost this process ~4 s of
    CPU)."""
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow
    from tensorboard.util import tensor_util

    out = []
    for path in sorted(logdir.glob("events.out.tfevents.*")):
        reader = pywrap_tensorflow.PyRecordReader_New(str(path))
        while True:
            try:
                reader.GetNext()
            except errors.OutOfRangeError:
                break
            event = event_pb2.Event.FromString(reader.record())
            for value in event.summary.value:
                if value.tag == tag:
                    assert value.metadata.plugin_data.plugin_name == "scalars"
                    out.append((event.step, float(tensor_util.make_ndarray(value.tensor))))
    return out


KINDS = {
    "sequence": ("1:7",),
    # tf.data: the iterator's state is saved with the checkpoint (its shuffles too),
    # and a reshuffling validation set validates the rows it would have
    "dataset": ("1:7",),
    # numpy: stopped mid-epoch, resumed and stopped again at an epoch's end, resumed to
    # the end (both kinds of stop and both kinds of resume in one run)
    "numpy": ("1:5", "2"),
}


@dataclass
class KindRuns:
    """One input kind's runs under ``dir``: each stop's process with the last checkpoint
    row after it, then the resume's process."""

    dir: Path
    stops: list[tuple[subprocess.CompletedProcess[str], dict]]
    resumed: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def sigterm_runs(tmp_path_factory: pytest.TempPathFactory
                 ) -> tuple[dict[str, KindRuns], subprocess.CompletedProcess[str]]:
    """Each kind stopped by SIGTERM and resumed, each run a process of its own (a real
    signal ends the process; a resume starts a fresh one); then, in one process for all
    kinds (tests/e2e/_serial_runs.py; a process of their own cost ~6 s of CPU apiece),
    what is not about its process: each finished run resumed again (``again.out``,
    ``h2.json``) and each kind's uninterrupted reference (``full/``). Nothing asserted
    here: each kind's test asserts on its own runs."""
    tmp = tmp_path_factory.mktemp("sigterm")
    runs: dict[str, KindRuns] = {}
    serial: list[dict] = []
    for kind, stops in KINDS.items():
        d = tmp / kind
        env = {"DET_RUNS_DIR": str(d / "runs"), "TINY_INPUT": kind}
        stopped = []
        for i, stop_at in enumerate(stops):
            proc = run_python(TINY, {**env, "TINY_STOP_AT": stop_at,
                                     **({"DET_RESUME": "1"} if i else {})})
            ckpts = d / "runs" / "1" / "checkpoints.jsonl"
            stopped.append((proc, _jsonl(ckpts)[-1] if ckpts.exists() else {}))
        resumed = run_python(TINY, {**env, "DET_RESUME": "1",
                                    "TINY_WEIGHTS_OUT": str(d / "w.npz"),
                                    "TINY_HISTORY_OUT": str(d / "h.json")})
        runs[kind] = KindRuns(d, stopped, resumed)
        serial += [
            {"script": str(TINY), "stdout": str(d / "again.out"),
             "env": {**env, "DET_RESUME": "1", "TINY_HISTORY_OUT": str(d / "h2.json")}},
            {"script": str(TINY), "stdout": str(d / "full.out"),
             "env": {"DET_RUNS_DIR": str(d / "full"), "TINY_INPUT": kind,
                     "TINY_WEIGHTS_OUT": str(d / "full" / "w.npz"),
                     "TINY_HISTORY_OUT": str(d / "full" / "h.json")}}]
    (tmp / "serial.json").write_text(json.dumps(serial))
    shared = run_python(SERIAL, {"SERIAL_SPEC": str(tmp / "serial.json")}, timeout=300)
    return runs, shared


@pytest.mark.timeout(1200)  # the first test runs sigterm_runs' 8 processes
@pytest.mark.parametrize(("kind", "resumed_epochs"),
                         [("sequence", "[1, 2, 3]"), ("dataset", "[1, 2, 3]"),
                          ("numpy", "[3]")])
def test_sigterm_then_resume_equals_uninterrupted(
    sigterm_runs: tuple[dict[str, KindRuns], subprocess.CompletedProcess[str]], kind: str,
    resumed_epochs: str
) -> None:
    all_runs, shared = sigterm_runs
    run = all_runs[kind]
    # the uninterrupted run's final weights and History
    assert shared.returncode == 0, shared.stderr[-3000:]
    assert "epochs run: [0, 1, 2, 3]" in (run.dir / "full.out").read_text()
    full_weights = dict(np.load(run.dir / "full" / "w.npz"))
    full_history = json.loads((run.dir / "full" / "h.json").read_text())

    cut: set[int] = set()  # epochs a stop cut in the middle
    for stop_at, (stopped, last) in zip(KINDS[kind], run.stops, strict=True):
        assert stopped.returncode == 0, stopped.stderr[-3000:]  # SIGTERM: checkpoint, exit 0
        assert "stopped by SIGTERM" in stopped.stderr
        assert "epochs run" not in stopped.stdout  # fit did not return: the process ended

        epoch, _, batch = stop_at.partition(":")
        expect = (int(epoch), int(batch)) if batch else (int(epoch) + 1, 0)
        assert (last["epoch"], last["batch"]) == expect
        cut |= {int(epoch)} if batch else set()

    resumed = run.resumed
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"epochs run: {resumed_epochs}" in resumed.stdout
    weights = np.load(run.dir / "w.npz")
    for k, full in full_weights.items():
        np.testing.assert_array_equal(weights[k], full)

    # fit returns the whole run's History, the uninterrupted run's bit for bit: every
    # epoch's validation (same weights), and the training averages of every epoch, those
    # a stop cut in two included (the metrics' state is saved with the checkpoint)
    assert "history epochs: [0, 1, 2, 3]" in resumed.stdout
    history = json.loads((run.dir / "h.json").read_text())
    assert sorted(history) == sorted(full_history)
    for k in full_history:
        assert history[k] == full_history[k], (k, sorted(cut))

    # a finished run resumed again trains nothing and still returns its History
    assert "epochs run: []" in (run.dir / "again.out").read_text()
    assert json.loads((run.dir / "h2.json").read_text())["val_loss"] == history["val_loss"]

    # one metrics row per group and step, however the run was interrupted
    rows = _jsonl(run.dir / "runs" / "1" / "metrics.jsonl")
    keys = [(r["group"], r["steps_completed"]) for r in rows]
    assert len(keys) == len(set(keys)) == 8


def test_ctrl_c_checkpoints_and_exits_130(tmp_path: Path) -> None:
    # SIGINT arrives from outside, as from a terminal, during a long run.
    env = {"DET_RUNS_DIR": str(tmp_path), "TINY_EPOCHS": "100000", "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.Popen([sys.executable, str(TINY)], env={**os.environ, **env}, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (tmp_path / "1" / "checkpoints.jsonl").exists():
        assert time.time() < deadline and proc.poll() is None, proc.communicate()[1][-2000:]
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert "stopped by SIGINT" in err and "Traceback" not in err
    assert "DET_RESUME=1" in err


def test_example_reads_yaml_1_2_numbers_and_environment_variables(
        example: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    """Issue 23: the proposal's train.py with ``learning_rate: 1e-1`` and ``dropout: .5``
    (YAML 1.2 floats; they were the strings '1e-1' and '.5' under YAML 1.1, and SGD
    refused them), and a config's environment_variables set for a local run where the
    shell has not set them: MNIST_NPZ comes from the config, EPOCHS from the shell."""
    proc, runs = example
    assert "ignores these Determined config fields" in proc.stderr  # environment.image
    assert "environment.image" in proc.stderr
    info = json.loads((runs / "1" / "run.json").read_text())
    assert info["hparams"]["learning_rate"] == 0.1 and info["hparams"]["dropout"] == 0.5
    assert info["config"]["environment"]["environment_variables"][1] == "EPOCHS=3"
    # the shell's EPOCHS=2 won over the config's 3; the config's MNIST_NPZ was read
    assert [(m["group"], m["epoch"]) for m in _jsonl(runs / "1" / "metrics.jsonl")] == [
        ("training", 1), ("validation", 1), ("training", 2), ("validation", 2)]
