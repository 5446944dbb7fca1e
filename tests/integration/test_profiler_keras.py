"""The profiler's timings from the Keras TensorFlow engine (det_sdk.profiler): each step
between Keras's batch hooks (its data's wait inside, so no data_wait_s), and the time a
checkpoint held training up, within ``profiling.begin_on_batch .. end_after_batch``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import det_sdk as det  # noqa: E402


class _Slow(tf.keras.callbacks.Callback):
    """Each batch takes >= 20 ms: a sleep in its begin hook, which Keras calls after
    det_sdk's (its callbacks come first), so inside the span det_sdk times."""

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        time.sleep(0.02)


def test_context_fit_reports_step_times_and_checkpoint_hold_ups(tmp_path: Path) -> None:
    ctx = det.keras.init(runs_dir=tmp_path, seed=7, config={
        "profiling": {"enabled": True, "begin_on_batch": 2, "end_after_batch": 9}})
    x = np.random.default_rng(0).normal(size=(120, 4)).astype("float32")
    y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1, "sigmoid")])
    model.compile(ctx.wrap_optimizer(tf.keras.optimizers.SGD(0.1)), "binary_crossentropy")
    xs, ys = ctx.wrap_data(x, y)
    ctx.fit(model, x=xs, y=ys, batch_size=10, epochs=2, verbose=0, callbacks=[_Slow()])
    ctx.close()
    records = [json.loads(line) for line in (tmp_path / "1" / "system.jsonl")
               .read_text().splitlines()]
    timings = [next(iter(r["metrics"].values())) for r in records if r["group"] == "timings"]
    assert sum(t["batches"] for t in timings) == 8  # batches 2..9 of 24
    assert all("data_wait_s" not in t for t in timings)  # Keras fetches inside its step
    assert all(t["step_s"] >= 0.02 for t in timings if t["batches"]), timings
    assert sum(t["checkpoint_blocked_s"] for t in timings) > 0  # a checkpoint each epoch
    assert {"cpu", "memory", "disk"} <= {r["group"] for r in records}
