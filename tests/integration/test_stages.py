"""Several fits in one script (issue 28): each ``context.fit`` is a stage of the run with
its own checkpoints, metrics and best; ``DET_RESUME`` resumes the stage that stopped and
restores the finished ones from their last checkpoints.

The script: a teacher (the first fit, unnamed: the default stage ``fit``), a student
trained on the teacher's outputs (``stage="student"``), then a baseline on the true
targets (unnamed: ``fit-3``).

This module's other half, its end-to-end tests (real processes): tests/e2e/test_stages.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import det_sdk as det  # noqa: E402
from det_sdk.stages import StageError, StageMismatchError  # noqa: E402
from tests.interrupt import Interrupt, InterruptAfter  # noqa: E402
from tests.support import read_jsonl  # noqa: E402

STEPS = 4  # 64 rows, batch 16
EPOCHS = {"fit": 3, "student": 4, "fit-3": 2}


def _data():
    rng = np.random.default_rng(11)
    w = np.array([1.0, -2.0, 0.5, 1.0], "float32")
    x = rng.normal(size=(64, 4)).astype("float32")
    y = np.tanh(x @ w)[:, None].astype("float32")
    xv = rng.normal(size=(32, 4)).astype("float32")
    return x, y, xv, np.tanh(xv @ w)[:, None].astype("float32")


def _model(ctx, width: int) -> tf.keras.Model:
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(width, "tanh"),
                                 tf.keras.layers.Dense(1)])
    model.compile(ctx.wrap_optimizer(tf.keras.optimizers.SGD(0.05, momentum=0.9)), "mse",
                  metrics=["mae"])
    return model


def _script(runs: Path, *, interrupt_student_after: int | None = None, resume: bool = False,
            student_width: int = 4):
    """The distiller-like script; returns the context and the three models."""
    ctx = det.keras.init(runs_dir=runs, seed=9, resume=True if resume else None)
    x, y, xv, yv = _data()
    teacher, student, baseline = _model(ctx, 16), _model(ctx, student_width), _model(ctx, 4)
    ctx.fit(teacher, x=x, y=y, batch_size=16, epochs=EPOCHS["fit"], validation_data=(xv, yv),
            verbose=0)
    soft, soft_val = ctx.predict(teacher, x, verbose=0), ctx.predict(teacher, xv, verbose=0)
    cbs = [InterruptAfter(interrupt_student_after)] if interrupt_student_after is not None \
        else []
    hist = ctx.fit(student, x=x, y=soft, batch_size=16, epochs=EPOCHS["student"],
                   validation_data=(xv, soft_val), verbose=0, callbacks=cbs, stage="student")
    ctx.fit(baseline, x=x, y=y, batch_size=16, epochs=EPOCHS["fit-3"],
            validation_data=(xv, yv), verbose=0)
    ctx.evaluate(student, xv, yv, verbose=0)
    ctx.close()
    return ctx, {"teacher": teacher, "student": student, "baseline": baseline}, hist


def _series(run_dir: Path) -> dict[tuple[str, str], list[int]]:
    out: dict[tuple[str, str], list[int]] = {}
    for r in read_jsonl(run_dir / "metrics.jsonl"):
        out.setdefault((r.get("stage", "fit"), r["group"]), []).append(r["steps_completed"])
    return out


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory):
    runs = tmp_path_factory.mktemp("uninterrupted") / "runs"
    ctx, models, hist = _script(runs)
    return {"run_dir": runs / "1", "ctx": ctx, "hist": hist,
            "weights": {k: m.get_weights() for k, m in models.items()}}


def test_each_fit_is_a_stage_with_its_own_records(uninterrupted) -> None:
    run_dir = uninterrupted["run_dir"]
    series = _series(run_dir)
    # validation at every epoch end, steps counted from 0 within each stage
    for stage, epochs in EPOCHS.items():
        assert series[(stage, "validation")] == [STEPS * e for e in range(1, epochs + 1)]
    # the default stage's rows carry no stage field (a single-fit run looks as before)
    assert all("stage" not in r for r in read_jsonl(run_dir / "metrics.jsonl")
               if r.get("stage", "fit") == "fit")
    # the student's evaluation is recorded in the student's stage, where it ended
    assert series[("student", "evaluation")] == [STEPS * EPOCHS["student"]]
    # every stage keeps its own latest checkpoint (retention per stage): the teacher's
    # final one survives the later stages
    ckpts = read_jsonl(run_dir / "checkpoints.jsonl")
    kept = [r for r in ckpts if (run_dir / "checkpoints" / r["uuid"]).is_dir()]
    last = {}
    for r in ckpts:
        last[r.get("stage", "fit")] = r
    assert {r.get("stage", "fit") for r in kept} == set(EPOCHS)
    for stage, epochs in EPOCHS.items():
        assert last[stage]["steps_completed"] == STEPS * epochs
        assert last[stage]["uuid"] in {r["uuid"] for r in kept}
        meta = json.loads((run_dir / "checkpoints" / last[stage]["uuid"] / "metadata.json")
                          .read_text())
        assert meta.get("stage", "fit") == stage
    # best per stage: the student's best is a student checkpoint
    checkpoints = uninterrupted["ctx"].core.checkpoint
    best_student = checkpoints.select(1, best=True, stage="student")
    assert best_student in {r["uuid"] for r in kept if r.get("stage") == "student"}
    assert checkpoints.select(1) == last["fit-3"]["uuid"]
    with pytest.raises(det.errors.DetSdkError, match="no checkpoint of stage 'nope'"):
        checkpoints.select(1, stage="nope")
    # a script loads one stage's model by its name
    ctx = uninterrupted["ctx"]
    teacher = ctx.load_checkpoint_model(trial_id=1, stage="fit")
    for a, b in zip(teacher.get_weights(), uninterrupted["weights"]["teacher"], strict=True):
        np.testing.assert_array_equal(a, b)
    student = ctx.load_checkpoint_model(trial_id=1, stage="student", best=True)
    assert len(student.get_weights()) == len(uninterrupted["weights"]["student"])
    with pytest.raises(det.errors.DetSdkError, match="not checkpoint_uuid"):
        ctx.load_checkpoint_model(checkpoint_uuid=last["fit"]["uuid"], stage="fit")
    with pytest.raises(det.errors.DetSdkError, match="stage: expected"):
        ctx.load_checkpoint_model(trial_id=1, stage="a b")


def test_resume_in_the_student_stage_ends_bit_equal(tmp_path: Path, uninterrupted) -> None:
    runs = tmp_path / "runs"
    with pytest.raises(Interrupt):
        _script(runs, interrupt_student_after=2)
    # the run stopped in the student stage: the teacher's stage is whole, the student's
    # checkpoint at epoch 2 is the latest, no baseline yet
    stages = [r.get("stage", "fit") for r in read_jsonl(runs / "1" / "checkpoints.jsonl")]
    assert stages[-1] == "student" and "fit-3" not in stages

    _, models, hist = _script(runs, resume=True)
    for name, weights in uninterrupted["weights"].items():
        for a, b in zip(weights, models[name].get_weights(), strict=True):
            np.testing.assert_array_equal(a, b, err_msg=name)
    # the resumed student's History is the whole stage's
    assert list(hist.epoch) == list(uninterrupted["hist"].epoch) == [0, 1, 2, 3]
    # each stage's series as in the uninterrupted run: nothing twice, nothing mixed
    assert _series(runs / "1") == _series(uninterrupted["run_dir"])
    # the teacher was restored, not trained again: its stage has one final checkpoint row
    teacher_rows = [r for r in read_jsonl(runs / "1" / "checkpoints.jsonl") if "stage" not in r]
    assert [r["steps_completed"] for r in teacher_rows] == [4, 8, 12]


def test_a_script_whose_stages_differ_is_refused(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    with pytest.raises(Interrupt):
        _script(runs, interrupt_student_after=1)
    # the student of the resumed script is another model: refused, naming the stage
    with pytest.raises(StageMismatchError, match=r"stage 'student'.*does not fit the model.*"
                                                r"\(4, 8\) in the model but \(4, 4\)"):
        _script(runs, resume=True, student_width=8)

    # a script whose second fit has another name than the run's
    ctx = det.keras.init(runs_dir=runs, seed=9, resume=True)
    x, y, xv, yv = _data()
    ctx.fit(_model(ctx, 16), x=x, y=y, batch_size=16, epochs=3, validation_data=(xv, yv),
            verbose=0)
    with pytest.raises(StageMismatchError,
                       match=r"stage 'pupil'.*stages with checkpoints: fit, student.*'student'"):
        ctx.fit(_model(ctx, 4), x=x, y=y, batch_size=16, epochs=4,
                validation_data=(xv, yv), verbose=0, stage="pupil")
    with pytest.raises(StageError, match="'fit' is already a stage"):
        ctx.fit(_model(ctx, 4), x=x, y=y, epochs=1, validation_data=(xv, yv), stage="fit")
    with pytest.raises(StageError, match="stage: expected"):
        ctx.fit(_model(ctx, 4), x=x, y=y, epochs=1, validation_data=(xv, yv), stage="a/b")
    ctx.close()
