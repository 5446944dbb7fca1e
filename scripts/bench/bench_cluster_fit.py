"""Cluster-mode `fit` vs local-mode `fit` of the same model: samples/s ratio.

The same training script runs as a local run (`python train.py`) and as a trial of a
real master (`det experiment create`), N times each, in alternating order (local
first, then cluster first, ...). In both, a timing
callback measures the training span after a warm-up epoch (end of epoch 1 to the
end of training: tracing excluded, and never fit()'s own return, which tf.data may
delay by seconds) and writes samples/s to a file. Checkpoints are on in both (a
trial cannot turn them off), so the difference is the master session: reports
queued to a background thread, preemption long-poll.

    .venv/bin/python scripts/bench/bench_cluster_fit.py [--reps 3] [--epochs 4]

Target (issue 4): cluster/local samples/s >= 0.97. Exit 1 if missed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: harness/
from harness.master import Cluster

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_time import process_cpu

TRAIN = '''
import json, os, time
import numpy as np
import tensorflow as tf
from tensorflow.keras import layers
import det_sdk as det

context = det.keras.init(config=os.environ.get("BENCH_CONFIG"))
out = context.config_data["out"]
rng = np.random.default_rng(0)
x = rng.random((4096, 28, 28, 1), dtype=np.float32)
y = tf.keras.utils.to_categorical(rng.integers(0, 10, 4096), 10)
xs, ys = context.wrap_data(x, y)
model = tf.keras.Sequential([
    tf.keras.Input((28, 28, 1)),
    layers.Conv2D(32, 3, activation="relu"), layers.MaxPooling2D(2),
    layers.Conv2D(64, 3, activation="relu"), layers.MaxPooling2D(2),
    layers.Flatten(), layers.Dropout(0.5), layers.Dense(10, activation="softmax"),
])
model.compile(context.wrap_optimizer(tf.keras.optimizers.SGD(0.01)), "categorical_crossentropy",
              metrics=["accuracy"])

class Span(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if epoch == 0:
            self.t0 = time.perf_counter()
    def on_train_end(self, logs=None):
        self.t1 = time.perf_counter()

span = Span()
epochs = context.config_data["epochs"]
context.fit(model, x=xs, y=ys, batch_size=128, epochs=epochs, validation_data=(x[:512], y[:512]),
            callbacks=[span], verbose=0)
samples = 4096 * (epochs - 1)
with open(out, "w") as f:
    json.dump({"samples_per_s": samples / (span.t1 - span.t0)}, f)
'''


def _cpu_seconds(master: Cluster) -> float:
    """CPU time the master process has used so far (it shares the cores with the trial)."""
    return process_cpu(int((master.data_dir / "master.pid").read_text()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--min-ratio", type=float, default=0.97)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-cluster-fit-"))
    model_dir = root / "model"
    model_dir.mkdir()
    (model_dir / "train.py").write_text(TRAIN)
    master = Cluster(root, slots=1)
    master.up()

    def config(name: str, out: Path) -> Path:
        import yaml

        cfg = {"name": name, "entrypoint_script": "python3 train.py",
               "searcher": {"name": "single", "metric": "val_loss",
                            "max_length": {"epochs": args.epochs}},
               "data": {"out": str(out), "epochs": args.epochs}}
        path = root / f"{name}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        return path

    def run_local(i: int, out: Path) -> None:
        subprocess.run([sys.executable, str(model_dir / "train.py")], check=True,
                       capture_output=True, cwd=root,
                       env={**master.env, "BENCH_CONFIG": str(config(f"local-{i}", out)),
                            "DET_RUNS_DIR": str(root / "runs")})

    def run_cluster(i: int, out: Path) -> str:
        cpu0, t0 = _cpu_seconds(master), time.monotonic()
        created = master.det("experiment", "create", str(config(f"cluster-{i}", out)),
                             str(model_dir), "--follow")
        master_cpu, wall = _cpu_seconds(master) - cpu0, time.monotonic() - t0
        if created.returncode != 0:
            raise RuntimeError(f"the cluster run failed: {created.stderr[-2000:]}")
        return f"the master used {master_cpu:.2f} s of CPU during the {wall:.1f} s cluster run"

    ratios = []
    try:
        for i in range(args.reps):
            local_out, cluster_out = root / f"local-{i}.json", root / f"cluster-{i}.json"
            # alternate which runs first: a machine that warms up or gets busier
            # during a pair must not always favour the same side
            order = "LC" if i % 2 == 0 else "CL"
            note = ""
            for which in order:
                if which == "L":
                    run_local(i, local_out)
                else:
                    note = run_cluster(i, cluster_out)
            local = json.loads(local_out.read_text())["samples_per_s"]
            cluster = json.loads(cluster_out.read_text())["samples_per_s"]
            ratios.append(cluster / local)
            print(f"rep {i} ({'local first' if order == 'LC' else 'cluster first'}): local "
                  f"{local:.0f} samples/s, cluster {cluster:.0f} samples/s, ratio "
                  f"{cluster / local:.3f}; {note}", flush=True)
    finally:
        master.stop()
    median = statistics.median(ratios)
    print(f"median cluster/local samples/s: {median:.3f} (target >= {args.min_ratio})")
    return 0 if median >= args.min_ratio else 1


if __name__ == "__main__":
    sys.exit(main())
