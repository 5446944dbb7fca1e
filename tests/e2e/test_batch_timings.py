"""Per-batch timings (issue 60, item 1's leftovers) for the training paths the PyTorch
Trainer's test (tests/e2e/test_system_metrics.py) does not cover: Keras 3 on JAX
(``context.fit``, det_sdk.keras._neutral), ``DeterminedCallback`` in a plain
``model.fit`` (Keras on TensorFlow) and a Core API loop telling
``core_context.profiler`` of its batches. Each runs as a real trial on one real master,
``profiling: {enabled: true}``; the Python client (``trial.iter_metrics("system")``, as a
user runs it, in a process of its own) reads the ``timings`` each reported.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.master import Cluster, create, logs_on_failure, wait_for_experiment

# each step takes >= 20 ms: a callback (Keras) or the loop (Core API) sleeps in it
KERAS_NEUTRAL = """
import time

import keras
import numpy as np

import det_sdk as det

class Slow(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.02)

context = det.keras.init(hparams={"global_batch_size": 16}, seed=1)
x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
x, y = context.wrap_data(x, y)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(optimizer=context.wrap_optimizer(keras.optimizers.SGD(0.01)), loss="mse")
context.fit(model, x=x, y=y, batch_size=16, epochs=2, validation_data=(x[:16], y[:16]),
            callbacks=[Slow()], verbose=0)
"""

CALLBACK = """
import time

import keras
import numpy as np

import det_sdk as det

class Slow(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.02)

with det.core.init() as core_context:
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(loss="mse", optimizer=keras.optimizers.SGD(0.01))
    det_cb = det.keras.DeterminedCallback(core_context, checkpoint=None, continue_id=1)
    x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    # Slow first: its batch end is inside the step DeterminedCallback times
    model.fit(x, y, batch_size=16, epochs=2, validation_data=(x[:16], y[:16]),
              callbacks=[Slow(), det_cb], verbose=0)
"""

CORE = """
import time

import det_sdk as det

with det.core.init() as core_context:
    profiler = core_context.profiler
    for step in range(1, 9):
        profiler.batch_start()
        time.sleep(0.02)  # the data's wait
        profiler.data_ready()
        time.sleep(0.03)  # the step
        profiler.step_end()
        if step == 4:
            began = time.perf_counter()
            time.sleep(0.05)  # a checkpoint's write, training held up
            profiler.checkpoint_blocked(time.perf_counter() - began)
        core_context.train.report_training_metrics(steps_completed=step,
                                                   metrics={"loss": 1.0 / step})
"""

RUNS = {
    "neutral": (KERAS_NEUTRAL, "jax", {"epochs": 2}, "val_loss"),
    "callback": (CALLBACK, "tensorflow", {"epochs": 2}, "val_loss"),
    "core": (CORE, None, 8, "loss"),
}


def _missing() -> str | None:
    for module in ("jax", "tensorflow", "keras"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed"
    # read from its metadata: importing Keras here would import TensorFlow
    if int(importlib.metadata.version("keras").split(".")[0]) < 3:
        return "Keras on JAX needs Keras 3"
    return None


@pytest.fixture(scope="module")
def trials(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, int]:
    """The trial of each run, COMPLETED (the three side by side)."""
    exps = {}
    for name, (script, backend, length, metric) in RUNS.items():
        if backend is not None and _missing():
            continue
        model = tmp_path_factory.mktemp(f"timings-{name}")
        (model / "train.py").write_text(textwrap.dedent(script))
        cfg: dict[str, Any] = {
            "name": f"timings-{name}", "entrypoint": "python3 train.py", "max_restarts": 0,
            "hyperparameters": {"global_batch_size": 16},
            "searcher": {"name": "single", "metric": metric, "max_length": length},
            "profiling": {"enabled": True}}
        if backend is not None:
            cfg["environment"] = {"environment_variables": [f"KERAS_BACKEND={backend}"]}
        path = model.parent / f"{model.name}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        exps[name] = create(cluster, path, model)
    out = {}
    for name, exp in exps.items():
        with logs_on_failure(cluster, exp):
            info = wait_for_experiment(cluster, exp, f"the {name} trial", timeout=300)
            (trial,) = info["trials"]
            assert trial["state"] == "COMPLETED", trial.get("last_error")
        out[name] = trial["id"]
    return out


@pytest.fixture(scope="module")
def timings(cluster: Cluster, trials: dict[str, int]) -> dict[str, list[dict[str, float]]]:
    """Each trial's ``timings`` records, as the Python client reads them."""
    probe = textwrap.dedent(f"""
        import json
        from det_sdk.experimental import client
        client.login(master={cluster.url!r})
        out = {{}}
        for name, trial_id in {trials!r}.items():
            trial = client.get_trial(trial_id)
            out[name] = [list(m.metrics.values())[0] for m in trial.iter_metrics("system")
                         if m.group == "timings"]
        print(json.dumps(out))
    """)
    done = subprocess.run([sys.executable, "-c", probe], env=cluster.env, capture_output=True,
                          text=True, timeout=60, cwd=cluster.root)
    assert done.returncode == 0, done.stderr[-3000:]
    got: dict[str, list[dict[str, float]]] = json.loads(done.stdout.strip().splitlines()[-1])
    return got


def _keras_checks(records: list[dict[str, float]], batches: int) -> None:
    assert sum(r["batches"] for r in records) == batches, records
    timed = [r for r in records if r["batches"]]
    # Keras fetches inside its step: the wait is in the step, no data_wait_s
    assert all(r["step_s"] >= 0.02 and "data_wait_s" not in r for r in timed), records
    assert sum(r["checkpoint_blocked_s"] for r in records) > 0, records  # the end's


def test_keras_on_jax_context_fit_times_its_batches(timings: dict[str, Any]) -> None:
    if "neutral" not in timings:
        pytest.skip(_missing() or "")
    _keras_checks(timings["neutral"], 8)  # 2 epochs of 64 rows in batches of 16


def test_determined_callback_times_its_batches(timings: dict[str, Any]) -> None:
    if "callback" not in timings:
        pytest.skip(_missing() or "")
    _keras_checks(timings["callback"], 8)


def test_core_api_loop_times_its_batches(timings: dict[str, Any]) -> None:
    records = timings["core"]
    assert sum(r["batches"] for r in records) == 8, records
    timed = [r for r in records if r["batches"]]
    assert all(r["data_wait_s"] >= 0.02 and r["step_s"] >= 0.03 for r in timed), records
    assert sum(r["checkpoint_blocked_s"] for r in records) >= 0.05, records


def test_core_api_profiler_refuses_a_bad_duration(tmp_path: Path) -> None:
    import det_sdk as det
    from det_sdk.errors import UsageError

    with det.core.init(config={"profiling": {"enabled": True}},
                       runs_dir=str(tmp_path)) as core_context:
        for bad in (-1.0, float("nan"), "1", True):
            with pytest.raises(UsageError, match="seconds must be a number >= 0"):
                core_context.profiler.checkpoint_blocked(bad)  # type: ignore[arg-type]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
