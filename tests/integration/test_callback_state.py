"""Callbacks across a resume (issue 28): Keras's stateful callbacks and a user's own
(``get_state``/``set_state``) are saved in det_sdk's checkpoints, so a run interrupted
and resumed with ``DET_RESUME`` trains what an uninterrupted one does: same epochs,
bit-equal weights, the same CSV rows and the same "best" file."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import xxhash

tf = pytest.importorskip("tensorflow")

import det_sdk as det  # noqa: E402
from det_sdk.keras import _callback_state  # noqa: E402
from tests.interrupt import Interrupt, InterruptAfter  # noqa: E402

BEST = "best.keras"


class CountImprovements(tf.keras.callbacks.Callback):
    """A user's stateful callback that opts in: its log depends on every epoch so far."""

    def __init__(self) -> None:
        super().__init__()
        self.best = math.inf
        self.improved: list[int] = []
        self.trace = np.zeros(3)

    def on_epoch_end(self, epoch, logs=None):
        if logs["val_loss"] < self.best:
            self.best = logs["val_loss"]
            self.improved.append(epoch)
        self.trace = self.trace * 0.5 + logs["val_loss"]

    def get_state(self):
        return {"best": self.best, "improved": self.improved, "trace": self.trace}

    def set_state(self, state):
        self.best = state["best"]
        self.improved = list(state["improved"])
        self.trace = state["trace"]


def _data():
    rng = np.random.default_rng(3)
    w = np.array([1.0, -2.0, 0.5, 1.0], "float32")
    x = rng.normal(size=(64, 4)).astype("float32")
    y = (x @ w)[:, None] + rng.normal(size=(64, 1)).astype("float32") * 2  # noisy: overfits
    xv = rng.normal(size=(32, 4)).astype("float32")
    return x, y, xv, (xv @ w)[:, None]


def _callbacks(out: Path, user: CountImprovements, interrupt_after: int | None):
    cbs = [
        tf.keras.callbacks.CSVLogger(str(out / "log.csv")),
        tf.keras.callbacks.EarlyStopping(monitor="val_loss", patience=2, restore_best_weights=True),
        tf.keras.callbacks.ModelCheckpoint(str(out / BEST), monitor="val_loss",
                                           save_best_only=True),
        tf.keras.callbacks.ReduceLROnPlateau(monitor="val_loss", patience=1, factor=0.5),
        user,
    ]
    if interrupt_after is not None:
        cbs.append(InterruptAfter(interrupt_after))
    return cbs


def _fit(runs: Path, out: Path, user: CountImprovements, interrupt_after: int | None = None,
         resume: bool = False):
    ctx = det.keras.init(runs_dir=runs, seed=5, resume=True if resume else None)
    x, y, xv, yv = _data()
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(32, "relu"),
                                 tf.keras.layers.Dense(1)])
    model.compile(ctx.wrap_optimizer(tf.keras.optimizers.SGD(0.02, momentum=0.9)), "mse")
    hist = ctx.fit(model, x=x, y=y, batch_size=16, epochs=40, validation_data=(xv, yv),
                   verbose=0, callbacks=_callbacks(out, user, interrupt_after))
    return ctx, model, hist


def _best_weights(path: Path) -> list[np.ndarray]:
    return tf.keras.models.load_model(path).get_weights()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("uninterrupted")
    user = CountImprovements()
    _, model, hist = _fit(out / "runs", out, user)
    return {"out": out, "weights": model.get_weights(), "epochs": list(hist.epoch),
            "user": user, "csv": (out / "log.csv").read_text()}


def test_uninterrupted_run_stops_early(uninterrupted) -> None:
    """The scenario is one where the callbacks' state matters: stopped well before 40."""
    assert 4 <= len(uninterrupted["epochs"]) < 40
    assert (uninterrupted["out"] / BEST).is_file()


def test_interrupted_and_resumed_run_trains_what_an_uninterrupted_one_does(
        tmp_path: Path, uninterrupted) -> None:
    n = len(uninterrupted["epochs"])
    # Interrupted at the last epoch's end, before its checkpoint: the run resumes from
    # the one before, where EarlyStopping waits (a fresh one would train on).
    cut = n - 1
    with pytest.raises(Interrupt):
        _fit(tmp_path / "runs", tmp_path, CountImprovements(), interrupt_after=cut)
    rows_then = (tmp_path / "log.csv").read_text().splitlines()
    assert len(rows_then) == cut + 2  # header, epochs 0..cut (the last one after the checkpoint)

    ctx, model, hist = _fit(tmp_path / "runs", tmp_path, user := CountImprovements(),
                            resume=True)
    assert list(hist.epoch) == uninterrupted["epochs"]
    for a, b in zip(uninterrupted["weights"], model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    # the CSV: epoch `cut` once (the row written after the checkpoint is dropped), one header
    assert (tmp_path / "log.csv").read_text() == uninterrupted["csv"]
    for a, b in zip(_best_weights(uninterrupted["out"] / BEST), _best_weights(tmp_path / BEST),
                    strict=True):
        np.testing.assert_array_equal(a, b)
    assert user.improved == uninterrupted["user"].improved
    assert user.best == uninterrupted["user"].best
    np.testing.assert_array_equal(user.trace, uninterrupted["user"].trace)

    meta = json.loads((ctx.core.checkpoint.checkpoint_path(ctx.core.checkpoint.latest_checkpoint)
                       / "metadata.json").read_text())
    saved = meta["callbacks"]
    assert saved["version"] == 1
    assert set(saved["states"]) == {"CSVLogger[0]", "EarlyStopping[0]", "ModelCheckpoint[0]",
                                    "ReduceLROnPlateau[0]", "CountImprovements[0]"}
    early = _callback_state.decode(saved["states"]["EarlyStopping[0]"])
    assert early["stopped_epoch"] == uninterrupted["epochs"][-1]
    # restore_best_weights: the best epoch's weights travel in the state as numpy arrays
    assert [w.shape for w in early["best_weights"]] == [w.shape for w in model.get_weights()]


def test_a_checkpoint_without_callback_state_still_resumes(tmp_path: Path) -> None:
    """Checkpoints written before callbacks' state was saved restore; the callbacks start
    afresh."""
    with pytest.raises(Interrupt):
        _fit(tmp_path / "runs", tmp_path, CountImprovements(), interrupt_after=2)
    ckpts = tmp_path / "runs" / "1" / "checkpoints"
    for meta_path in ckpts.glob("*/metadata.json"):
        meta = json.loads(meta_path.read_text())
        del meta["callbacks"]
        meta_path.write_text(json.dumps(meta))
        # re-signed: a checkpoint's checksums are checked whatever its metadata says
        sums_path = meta_path.parent / "checksums.json"
        sums = json.loads(sums_path.read_text())
        sums["files"]["metadata.json"] = xxhash.xxh3_64_hexdigest(meta_path.read_bytes())
        sums_path.write_text(json.dumps(sums))
    _, _, hist = _fit(tmp_path / "runs", tmp_path, CountImprovements(), resume=True)
    assert hist.epoch[:2] == [0, 1]


def test_state_encoding_round_trips_and_refuses_what_it_cannot_hold() -> None:
    state = {"a": [1, 2.5, None, True, "s"], "inf": -math.inf, "arr": np.arange(6.0).reshape(2, 3),
             "n": np.float32(0.25), "t": (1, 2)}
    back = _callback_state.decode(json.loads(json.dumps(_callback_state.encode(state, "cb"))))
    assert back["a"] == [1, 2.5, None, True, "s"] and back["inf"] == -math.inf
    np.testing.assert_array_equal(back["arr"], state["arr"])
    assert back["arr"].dtype == np.float64 and back["n"] == 0.25 and back["t"] == [1, 2]
    with pytest.raises(_callback_state.CallbackStateError, match=r"cb\.bad: a set"):
        _callback_state.encode({"bad": {1, 2}}, "cb")
    with pytest.raises(det.errors.DetSdkError, match="dict keys must be str"):
        _callback_state.encode({1: 2}, "cb")


def test_relative_callback_files_go_to_the_trials_folder(tmp_path: Path, capsys,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """On the cluster (a session with files_dir), relative ModelCheckpoint/CSVLogger paths
    are resolved under it, absolute ones stay; locally (None) nothing changes."""
    monkeypatch.chdir(tmp_path)  # the link kept for the relative path goes here, not in the repo
    csv = tf.keras.callbacks.CSVLogger("logs/e.csv")
    best = tf.keras.callbacks.ModelCheckpoint(str(tmp_path / "abs.keras"))
    assert _callback_state.keep_files_with_trial([csv, best], None) == {}
    assert csv.filename == "logs/e.csv"
    moved = _callback_state.keep_files_with_trial([csv, best], tmp_path / "trial_files")
    assert moved == {"CSVLogger[0]": str(tmp_path / "trial_files" / "logs" / "e.csv")}
    assert csv.filename == moved["CSVLogger[0]"] and (tmp_path / "trial_files" / "logs").is_dir()
    assert best.filepath == str(tmp_path / "abs.keras")
    assert "CSVLogger[0] -> " in capsys.readouterr().err
