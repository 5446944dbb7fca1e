"""Benchmark: a det_sdk checkpoint save + load against Keras's own ``.keras`` save + load.

The same compiled model (a Dense stack of about ``--params`` parameters, Adam, one
training step taken so that the optimizer's slots exist) is

* A, det_sdk: ``det_sdk.keras._checkpoint.save_checkpoint(dir, model, [opt], meta)`` into
  a fresh directory, then ``det_sdk.keras._checkpoint.load_model(dir)``;
* B, Keras: ``model.save("<dir>/model.keras")``, then
  ``tf.keras.models.load_model("<dir>/model.keras")``.

Neither path calls fsync (``save_checkpoint`` leaves that to the checkpoint storage,
``model.save`` never does), so the comparison is like for like. As a physical reference
the script also times writing the same number of bytes raw (with and without fsync) and
reading them back. Repetitions alternate A and B (the order flipped every other one); the
medians of the per-repetition ratios A/B are reported for save, load and save+load. The
loaded models' predictions must equal the original's (and det_sdk's Adam state too).

Usage::

    .venv/bin/python scripts/bench_checkpoint.py [--params 5000000] [--reps 5]
        [--max-ratio 1.15]

Exit status 1 when the median save+load ratio exceeds ``--max-ratio``.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import math
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from det_sdk.keras import _checkpoint

DEPTH = 4  # hidden Dense layers of width w, input width w: params ~ DEPTH * w * w


def build_model(params: int, seed: int) -> tuple[tf.keras.Model, np.ndarray]:
    """A compiled Dense stack of about ``params`` parameters, trained one step with Adam.

    Returns the model and a batch of inputs to compare predictions on.
    """
    # DEPTH * (w*w + w) + 10*w + 10 = params
    a, b, c = DEPTH, DEPTH + 10, 10 - params
    width = max(8, round((-b + math.sqrt(b * b - 4 * a * c)) / (2 * a)))
    tf.keras.utils.set_random_seed(seed)
    layers = [tf.keras.Input(shape=(width,))]
    layers += [tf.keras.layers.Dense(width, activation="relu") for _ in range(DEPTH)]
    layers.append(tf.keras.layers.Dense(10, activation="softmax"))
    model = tf.keras.Sequential(layers)
    model.compile(optimizer=tf.keras.optimizers.Adam(1e-3),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((64, width)).astype(np.float32)
    y = rng.integers(0, 10, size=64)
    model.train_on_batch(x, y)  # builds Adam's slots (m, v) and steps its iteration count
    return model, x


def det_save(model: tf.keras.Model, path: Path) -> int:
    path.mkdir()
    meta = {"epoch": 0, "batch": 1, "steps_completed": 1}
    return _checkpoint.save_checkpoint(path, model, [model.optimizer], meta,
                                       plain_optimizer=model.optimizer)


def det_load(path: Path) -> tf.keras.Model:
    return _checkpoint.load_model(path)


def keras_save(model: tf.keras.Model, path: Path) -> int:
    path.mkdir()
    model.save(path / "model.keras")
    return (path / "model.keras").stat().st_size


def keras_load(path: Path) -> tf.keras.Model:
    return tf.keras.models.load_model(path / "model.keras")


def raw_io(nbytes: int, where: Path) -> tuple[float, float, float]:
    """(write, write+fsync, read) seconds for ``nbytes`` in one file."""
    data = np.random.default_rng(0).bytes(nbytes)
    f1, f2 = where / "raw1.bin", where / "raw2.bin"
    t0 = time.perf_counter()
    with open(f1, "wb") as f:
        f.write(data)
    t_write = time.perf_counter() - t0
    t0 = time.perf_counter()
    with open(f2, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    t_sync = time.perf_counter() - t0
    buf = bytearray(nbytes)
    t0 = time.perf_counter()
    with open(f1, "rb", buffering=0) as f:
        f.readinto(memoryview(buf))
    t_read = time.perf_counter() - t0
    f1.unlink()
    f2.unlink()
    return t_write, t_sync, t_read


def _timed(fn: Any, *args: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def check_same(original: tf.keras.Model, loaded: tf.keras.Model, x: np.ndarray, what: str,
               optimizer_state: bool) -> None:
    want = original(x, training=False).numpy()
    got = loaded(x, training=False).numpy()
    assert np.array_equal(want, got), f"{what}: loaded model predicts differently"
    assert loaded.optimizer is not None, f"{what}: loaded model is not compiled"
    if optimizer_state:
        a = [v.numpy() for v in original.optimizer.variables]
        b = [v.numpy() for v in loaded.optimizer.variables]
        assert len(a) == len(b) and all(np.array_equal(p, q) for p, q in zip(a, b)), \
            f"{what}: optimizer state differs"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=int, default=5_000_000,
                        help="model parameters, about (default 5000000)")
    parser.add_argument("--reps", type=int, default=5, help="A/B repetitions (default 5)")
    parser.add_argument("--max-ratio", type=float, default=1.15,
                        help="fail when the median save+load ratio det/keras exceeds this")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    model, x = build_model(args.params, args.seed)
    n_params = model.count_params()
    state_bytes = sum(v.numpy().nbytes for v in [*model.weights, *model.optimizer.variables])
    base = Path(tempfile.mkdtemp(prefix="bench-ckpt-", dir=args.dir))
    print(f"tf {tf.__version__}, {os.cpu_count()} cpus; model {n_params:,} params, "
          f"Adam; state {state_bytes / 2**20:.1f} MiB; {args.reps} reps; in {base}")
    try:
        # Warm up both paths once (first-use imports, tracing of predict functions).
        for name, save, load in (("det", det_save, det_load), ("keras", keras_save, keras_load)):
            d = base / f"warm-{name}"
            save(model, d)
            check_same(model, load(d), x, name, optimizer_state=name == "det")
            shutil.rmtree(d)

        rows: list[dict[str, float]] = []
        sizes: dict[str, int] = {}
        for i in range(args.reps):
            order = ("det", "keras") if i % 2 == 0 else ("keras", "det")
            row: dict[str, float] = {}
            for name in order:
                save, load = (det_save, det_load) if name == "det" else (keras_save, keras_load)
                d = base / f"{name}-{i}"
                row[f"{name}_save"], sizes[name] = _timed(save, model, d)
                row[f"{name}_load"], loaded = _timed(load, d)
                check_same(model, loaded, x, name, optimizer_state=name == "det")
                del loaded
                shutil.rmtree(d)
            row["raw_write"], row["raw_fsync"], row["raw_read"] = raw_io(sizes["det"], base)
            rows.append(row)
            print(f"rep {i + 1} ({order[0]} first): det save {row['det_save']:.3f}s "
                  f"load {row['det_load']:.3f}s | keras save {row['keras_save']:.3f}s "
                  f"load {row['keras_load']:.3f}s | raw write {row['raw_write']:.3f}s "
                  f"write+fsync {row['raw_fsync']:.3f}s read {row['raw_read']:.3f}s")
    finally:
        shutil.rmtree(base, ignore_errors=True)

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rows)

    def ratio(num: Any, den: Any) -> float:
        return statistics.median(num(r) / den(r) for r in rows)

    save_r = ratio(lambda r: r["det_save"], lambda r: r["keras_save"])
    load_r = ratio(lambda r: r["det_load"], lambda r: r["keras_load"])
    total_r = ratio(lambda r: r["det_save"] + r["det_load"],
                    lambda r: r["keras_save"] + r["keras_load"])
    print(f"\nsizes: det_sdk checkpoint {sizes['det'] / 2**20:.1f} MiB, "
          f".keras {sizes['keras'] / 2**20:.1f} MiB")
    print(f"medians: det save {med('det_save'):.3f}s load {med('det_load'):.3f}s | "
          f"keras save {med('keras_save'):.3f}s load {med('keras_load'):.3f}s | "
          f"raw write {med('raw_write'):.3f}s write+fsync {med('raw_fsync'):.3f}s "
          f"read {med('raw_read'):.3f}s")
    print(f"median ratio det/keras: save {save_r:.3f}, load {load_r:.3f}, "
          f"save+load {total_r:.3f}")
    ok = total_r <= args.max_ratio
    print(f"median save+load ratio det/keras {total_r:.3f} (target <= {args.max_ratio}) "
          f"{'OK' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
