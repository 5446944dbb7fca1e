"""Several fits in one trial (det_sdk.stages): a teacher (the default stage ``fit``), a
student trained on its outputs (``student``: the searched stage, named in init), then a
baseline (``baseline``). data.teacher_epochs / data.baseline_epochs: their lengths;
data.crash_in_student_at_epoch: exit 3 at that student epoch's end, once per trial;
data.baseline_hold: a directory: after the baseline's first epoch's third batch write
DIR/reached and wait (up to 120 s) for DIR/release (the test pauses the trial meanwhile)."""

import os
import time
from pathlib import Path

import httpx
import numpy as np
import tensorflow as tf

import det_sdk as det

context = det.keras.init(searched_stage="student")
data = context.config_data
rng = np.random.default_rng(0)
x = rng.normal(size=(160, 8)).astype("float32")
y = np.tanh(x @ rng.normal(size=(8, 1))).astype("float32")
xs, ys = context.wrap_data(x, y)
xv, yv = x[:40], y[:40]


def model(width):
    m = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(width, "tanh"),
                             tf.keras.layers.Dense(1)])
    m.compile(context.wrap_optimizer(tf.keras.optimizers.SGD(0.05)), "mse")
    return m


def student_checkpoint_reported(timeout=120.0):
    """Wait until the master lists a checkpoint of the student stage. Reports are sent in
    the background: a crash right after a checkpoint may come before its report, and the
    resume then starts from the teacher's last checkpoint instead (the teacher is then the
    last stage reached, resumed, not "finished before the resume"). Seen under CI's load
    on Keras 2: the test that reads the resume's log line found none."""
    url = f"{os.environ['DET_MASTER']}/api/v1/trials/{os.environ['DET_TRIAL_ID']}/checkpoints"
    headers = {"Authorization": f"Bearer {os.environ['DET_SESSION_TOKEN']}"}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = httpx.get(url, params={"latest": "true", "stage": "student"}, headers=headers)
        if got.status_code == 200 and got.json():
            return
        time.sleep(0.1)
    raise SystemExit("the student's first checkpoint was not reported within "
                     f"{timeout} s")


class CrashOnce(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        marker = Path("crashed-in-student")
        if data.get("crash_in_student_at_epoch") == epoch and not marker.exists():
            if "DET_TRIAL_ID" in os.environ:
                student_checkpoint_reported()
            marker.write_text("x")
            os._exit(3)


class Hold(tf.keras.callbacks.Callback):
    """Holds the baseline after its first epoch's third batch until the test has paused the
    trial: a pause that lands in the middle of the baseline for sure, without epochs that
    only buy time."""

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        hold = data.get("baseline_hold")
        if hold and (self.epoch, batch) == (0, 2):
            Path(hold, "reached").write_text("x")
            deadline = time.monotonic() + 120
            while not Path(hold, "release").exists() and time.monotonic() < deadline:
                time.sleep(0.05)


teacher, student, baseline = model(16), model(4), model(4)
context.fit(teacher, xs, ys, batch_size=16, epochs=data["teacher_epochs"],
            validation_data=(xv, yv), verbose=0)
soft = context.predict(teacher, xs, verbose=0)
context.fit(student, xs, soft, batch_size=16, epochs=100, validation_data=(xv, yv),
            verbose=0, callbacks=[CrashOnce()], stage="student")
context.fit(baseline, xs, ys, batch_size=16, epochs=data["baseline_epochs"],
            validation_data=(xv, yv), verbose=0, stage="baseline", callbacks=[Hold()])
