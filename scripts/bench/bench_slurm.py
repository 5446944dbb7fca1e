"""Submit-to-first-batch latency: the Slurm resource manager against the local one.

Two masters side by side in one run, on the same machine: one with the local resource
manager (processes, ``horovodrun`` for 2 slots), one with ``--resource-manager slurm``
on the simulated cluster of ``scripts/slurm-sim.sh`` (started here, in its own state
directory, if it is not running; stopped again at the end if it was started here).
Each sample submits a one-trial experiment over HTTP and times until the trial's rank 0
begins its first training batch (the trial writes the time; same clock); the trial also
writes when its script started, when TensorFlow was imported and when
``det.keras.init()`` returned (with several ranks: Horovod's rendezvous), which splits
the latency into "until the process runs" (the resource manager: a Popen, or sbatch,
Slurm's scheduling, the batch step and srun) and what the script does. Pairs alternate
which master goes first; samples run one at a time, so they do not share the CPU. With
4 slots the Slurm trial spans 2 of the simulated nodes; the local one is
``horovodrun -np 4`` here.

    python scripts/bench/bench_slurm.py [--pairs 5] [--slots 1 2 4]

Prints each sample, then per slot count the medians, the ratio Slurm / local and the
difference. A pair counts only if both trials completed.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: harness/
from harness.master import Cluster

REPO = Path(__file__).resolve().parents[2]
SIM = REPO / "scripts" / "slurm-sim.sh"
SIM_ENV = {"DET_SLURM_SIM_DIR": os.environ.get("DET_SLURM_SIM_DIR", "/tmp/det-slurm-sim-bench"),
           "DET_SLURM_SIM_PORT": os.environ.get("DET_SLURM_SIM_PORT", "17017")}

TRAIN = '''\
import time
started = time.time()  # before any import: when the resource manager's process ran
import json
from pathlib import Path

import numpy as np
import tensorflow as tf

import det_sdk as det
from det_sdk.env import outside

imported = time.time()
context = det.keras.init()  # with several ranks: hvd.init(), the Gloo rendezvous
initialized = time.time()
out = Path(context.config_data["out"])


class FirstBatch(tf.keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        if context.distributed.is_chief and not out.exists():
            out.write_text(json.dumps({"started": started, "imported": imported,
                                       "initialized": initialized, "first_batch": time.time()}))


rng = np.random.default_rng(0)
x = rng.normal(size=(64, 8)).astype("float32")
y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")
xs, ys = context.wrap_data(x, y)
model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(1, "sigmoid")])
model.compile(context.wrap_optimizer(tf.keras.optimizers.SGD(0.1)), "binary_crossentropy")
context.fit(model, x=xs, y=ys, batch_size=context.distributed.shard_batch_size(16),
            validation_data=(xs, ys), callbacks=[FirstBatch()], verbose=0)
'''


class Master(Cluster):
    """A master of this benchmark's, under ``root/name``, on a free port."""

    def __init__(self, root: Path, name: str, *options: str, env: dict[str, str]) -> None:
        super().__init__(root / name, options=options, env=env)
        self.name = name

    def up(self) -> None:
        super().up()
        self.http = httpx.Client(base_url=self.url, timeout=60,
                                 headers={"Authorization": f"Bearer {self.token}"})
        print(f"{self.name}: up at {self.url}")

    def sample(self, archive: str, slots: int, out: Path) -> dict[str, float] | None:
        """Submit one trial; its latencies, or None if it did not complete."""
        config = {"name": f"latency-{self.name}-{slots}", "entrypoint_script": "python3 train.py",
                  "hyperparameters": {"global_batch_size": 16},
                  "searcher": {"name": "single", "metric": "val_loss",
                               "max_length": {"batches": 2}},
                  "resources": {"slots_per_trial": slots}, "max_restarts": 0,
                  "data": {"out": str(out)}}
        t0 = time.time()
        r = self.http.post("/api/v1/experiments",
                           json={"config": config, "model_definition": archive})
        r.raise_for_status()
        exp_id = r.json()["id"]
        deadline = time.time() + 300
        while (state := self.http.get(f"/api/v1/experiments/{exp_id}").json()["state"]) in (
                "ACTIVE",):
            if time.time() > deadline:
                return None
            time.sleep(0.2)
        if state != "COMPLETED" or not out.exists():
            print(f"  {self.name} experiment {exp_id}: {state}", file=sys.stderr)
            return None
        times = json.loads(out.read_text())
        return {"first_batch": times["first_batch"] - t0, "to_process": times["started"] - t0,
                "in_process": times["first_batch"] - times["started"],
                "import": times["imported"] - times["started"],
                "init": times["initialized"] - times["imported"]}


def sim_up() -> tuple[str, bool]:
    """SLURM_CONF of the simulated cluster; whether this run started it."""
    env = {**os.environ, **SIM_ENV}
    running = subprocess.run(["bash", str(SIM), "status"], env=env, capture_output=True,
                             text=True).returncode == 0
    out = subprocess.run(["bash", str(SIM), "up"], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"no Slurm: scripts/slurm-sim.sh up failed:\n{out.stderr}")
    return out.stdout.strip().splitlines()[-1].removeprefix("export SLURM_CONF="), not running


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--slots", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    from det_sdk.master.archive import pack

    conf, started = sim_up()
    root = Path(tempfile.mkdtemp(prefix="bench-slurm-"))
    (root / "model").mkdir()
    (root / "model" / "train.py").write_text(TRAIN)
    archive = base64.b64encode(pack(root / "model")).decode()
    env = {"SLURM_CONF": conf, "TF_CPP_MIN_LOG_LEVEL": "2"}
    local = Master(root, "local", "--slots", str(max(args.slots)), env=env)
    slurm = Master(root, "slurm", "--resource-manager", "slurm", "--shared-dir",
                   str(root / "shared"), env=env)
    results: dict[tuple[str, int], list[dict[str, float]]] = {}
    n = 0
    try:
        local.up()
        slurm.up()
        for slots in args.slots:
            for pair in range(args.pairs):
                order = (local, slurm) if pair % 2 == 0 else (slurm, local)
                got = {}
                for m in order:
                    n += 1
                    got[m.name] = m.sample(archive, slots, root / f"out-{n}.json")
                if None in got.values():
                    print(f"slots {slots} pair {pair + 1}: dropped (a trial did not complete)")
                    continue
                for name, s in got.items():
                    results.setdefault((name, slots), []).append(s)
                print(f"slots {slots} pair {pair + 1} ({order[0].name} first): " + ", ".join(
                    f"{name} {s['first_batch']:.2f} s ({s['to_process']:.2f} to the process)"
                    for name, s in got.items()), flush=True)
    finally:
        local.stop()
        slurm.stop()
        if started:
            subprocess.run(["bash", str(SIM), "down"], env={**os.environ, **SIM_ENV},
                           capture_output=True)
    print("\nmedians (seconds) | submit -> first batch | submit -> process | process -> "
          "first batch (of which: import TF, det.keras.init)")
    for slots in args.slots:
        rows = {name: results.get((name, slots), []) for name in ("local", "slurm")}
        if min(len(r) for r in rows.values()) < max(2, args.pairs // 2 + 1):
            print(f"slots {slots}: too few clean pairs ({len(rows['slurm'])}) to compare")
            continue
        med = {name: {k: statistics.median(s[k] for s in r) for k in r[0]}
               for name, r in rows.items()}
        for name in ("local", "slurm"):
            m = med[name]
            print(f"slots {slots} {name:5} | {m['first_batch']:.2f} | {m['to_process']:.2f} | "
                  f"{m['in_process']:.2f} ({m['import']:.2f}, {m['init']:.2f})   "
                  f"({len(rows[name])} samples)")
        ratio = med["slurm"]["first_batch"] / med["local"]["first_batch"]
        extra = med["slurm"]["first_batch"] - med["local"]["first_batch"]
        print(f"slots {slots}: Slurm / local = {ratio:.2f} (Slurm {extra:+.2f} s; until the "
              f"process runs {med['slurm']['to_process'] - med['local']['to_process']:+.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
