"""Several fits in one script (issue 28): each ``context.fit`` is a stage of the run with
its own checkpoints, metrics and best; ``DET_RESUME`` resumes the stage that stopped and
restores the finished ones from their last checkpoints.

The script: a teacher (the first fit, unnamed: the default stage ``fit``), a student
trained on the teacher's outputs (``stage="student"``), then a baseline on the true
targets (unnamed: ``fit-3``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import det_sdk as det  # noqa: E402
from det_sdk.stages import StageError, StageMismatchError  # noqa: E402
from tests.interrupt import Interrupt, InterruptAfter  # noqa: E402

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


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _series(run_dir: Path) -> dict[tuple[str, str], list[int]]:
    out: dict[tuple[str, str], list[int]] = {}
    for r in _rows(run_dir / "metrics.jsonl"):
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
    assert all("stage" not in r for r in _rows(run_dir / "metrics.jsonl")
               if r.get("stage", "fit") == "fit")
    # the student's evaluation is recorded in the student's stage, where it ended
    assert series[("student", "evaluation")] == [STEPS * EPOCHS["student"]]
    # every stage keeps its own latest checkpoint (retention per stage): the teacher's
    # final one survives the later stages
    ckpts = _rows(run_dir / "checkpoints.jsonl")
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
    session = uninterrupted["ctx"].session
    best_student = session.checkpoint_for_trial(1, best=True, stage="student")
    assert best_student in {r["uuid"] for r in kept if r.get("stage") == "student"}
    assert session.checkpoint_for_trial(1) == last["fit-3"]["uuid"]
    with pytest.raises(det.errors.DetSdkError, match="no checkpoint of stage 'nope'"):
        session.checkpoint_for_trial(1, stage="nope")
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
    stages = [r.get("stage", "fit") for r in _rows(runs / "1" / "checkpoints.jsonl")]
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
    teacher_rows = [r for r in _rows(runs / "1" / "checkpoints.jsonl") if "stage" not in r]
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


@pytest.fixture(scope="module")
def staged_trial(cluster) -> int:
    """A finished trial on a real master (1 slot) whose script has three stages, the
    student searched; it crashed once in the student stage. Its id."""
    from cluster_harness import create, wait_until

    config = cluster.write_config(
        "stages", searcher={"name": "single", "metric": "val_loss",
                            "max_length": {"epochs": 3}},
        data={"teacher_epochs": 2, "baseline_epochs": 1, "crash_in_student_at_epoch": 1},
        resources={"slots_per_trial": 1}, checkpoint_storage={"save_trial_latest": 1,
                                                              "save_trial_best": 0})
    exp_id = create(cluster, config, Path(__file__).parent / "stages_model")
    with cluster.http() as http:
        def trial():
            exp = http.get(f"/api/v1/experiments/{exp_id}").json()
            return exp["trials"][0] if exp["trials"] else None

        t = wait_until("the trial to end", lambda: (t := trial()) and t["state"] in (
            "COMPLETED", "ERROR", "CANCELED") and t, timeout=300, every=0.5)
    assert t["state"] == "COMPLETED", cluster.det("trial", "logs", str(t["id"])).stdout[-3000:]
    return t["id"]


@pytest.mark.slow
def test_on_the_cluster_the_searched_stage_trains_the_searcher_length(cluster,
                                                                      staged_trial) -> None:
    """The teacher and baseline train their own epochs, the student (init(searched_stage=
    "student")) the searcher's 3; the crash in the student stage restarted the trial, which
    restored the teacher and resumed the student; the trial's progress and best metric are
    the student's; the API and describe list the stages."""
    t = {"id": staged_trial}
    with cluster.http() as http:
        info = http.get(f"/api/v1/trials/{t['id']}").json()
        assert info["restarts"] == 1
        stages = {s["name"]: s for s in info["stages"]}
        assert [s["name"] for s in info["stages"]] == ["fit", "student", "baseline"]
        assert {n: (s["epoch"], s["steps_completed"], s["searched"], s["state"])
                for n, s in stages.items()} == {
            "fit": (2, 20, False, "COMPLETED"), "student": (3, 30, True, "COMPLETED"),
            "baseline": (1, 10, False, "COMPLETED")}
        # the trial's progress and best are the searched stage's
        assert info["steps_completed"] == 30
        assert info["best_metric"] == pytest.approx(stages["student"]["best_metric"])
        # each stage's series on its own, steps from 0; the default one as before
        def steps(stage):
            params = {"group": "validation", **({"stage": stage} if stage else {})}
            rows = http.get(f"/api/v1/trials/{t['id']}/metrics", params=params).json()
            return [r["steps_completed"] for r in rows]

        assert steps(None) == [10, 20]
        assert steps("student") == [10, 20, 30]
        assert steps("baseline") == [10]
        # retention per stage: each stage's last checkpoint kept, the teacher's too
        ckpts = http.get("/api/v1/checkpoints", params={"trial_id": t["id"]}).json()
        kept = {c["stage"] or "fit": c["uuid"] for c in ckpts["checkpoints"]}
        assert kept == {n: s["latest_checkpoint"] for n, s in stages.items()}
        best = http.get(f"/api/v1/trials/{t['id']}/checkpoints", params={"best": "true"}).json()
        assert best[0]["stage"] == "student"
        # latest/best of one stage (load_checkpoint_model(stage=) asks this)
        for name, stage in stages.items():
            got = http.get(f"/api/v1/trials/{t['id']}/checkpoints",
                           params={"latest": "true", "stage": name}).json()
            assert got[0]["uuid"] == stage["latest_checkpoint"]
        got = http.get(f"/api/v1/trials/{t['id']}/checkpoints",
                       params={"best": "true", "stage": "baseline"}).json()
        assert got[0]["uuid"] == stages["baseline"]["latest_checkpoint"]
        missing = http.get(f"/api/v1/trials/{t['id']}/checkpoints",
                           params={"latest": "true", "stage": "nope"})
        assert missing.status_code == 404 and "of stage 'nope'" in missing.text
        # the restart restored the teacher instead of training it again
        logs = cluster.det("trial", "logs", str(t["id"])).stdout
        assert "stage 'fit' was finished before the resume" in logs

    out = cluster.det("trial", "describe", str(t["id"]))
    assert out.returncode == 0, out.stderr
    assert "STAGE" in out.stdout and "student" in out.stdout and "baseline" in out.stdout
    as_json = json.loads(cluster.det("trial", "describe", str(t["id"]), "--json").stdout)
    assert [s["name"] for s in as_json["stages"]] == ["fit", "student", "baseline"]
    assert {(m.get("stage") or "fit", m["group"]) for m in as_json["metrics"]} >= {
        ("fit", "validation"), ("student", "validation"), ("baseline", "validation")}


@pytest.mark.slow
def test_stages_under_horovodrun_resume_bit_equal(tmp_path: Path) -> None:
    """`horovodrun -np 2`: SIGTERM to rank 0 in the student stage stops both processes;
    DET_RESUME restores the teacher (both ranks), resumes the student and trains the
    baseline to the same weights as an uninterrupted 2-process run."""
    from test_horovod import HOROVODRUN, SCRIPTS, horovodrun

    if not HOROVODRUN.exists():
        pytest.skip("horovodrun not installed")
    script = SCRIPTS / "hvd_stages.py"
    full = horovodrun(script, {"DET_RUNS_DIR": str(tmp_path / "full"),
                               "STAGES_WEIGHTS_OUT": str(tmp_path / "full.npz")})
    assert full.returncode == 0, full.stdout[-3000:] + full.stderr[-3000:]
    runs = str(tmp_path / "stopped")
    stopped = horovodrun(script, {"DET_RUNS_DIR": runs, "STAGES_STOP_AT": "1"})
    assert stopped.returncode == 0, stopped.stdout[-3000:] + stopped.stderr[-3000:]
    stages = [r.get("stage") for r in _rows(Path(runs) / "1" / "checkpoints.jsonl")]
    assert stages[-1] == "student" and "baseline" not in stages
    resumed = horovodrun(script, {"DET_RUNS_DIR": runs, "DET_RESUME": "1",
                                  "STAGES_WEIGHTS_OUT": str(tmp_path / "resumed.npz")})
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "stage 'teacher' was finished before the resume" in resumed.stdout + resumed.stderr
    a, b = np.load(tmp_path / "full.npz"), np.load(tmp_path / "resumed.npz")
    assert sorted(a) == sorted(b) and len(a) == 12
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.mark.slow
def test_the_trial_page_shows_the_stages_and_each_ones_series(cluster, staged_trial) -> None:
    """Headless Chromium: the trial page lists the stages; picking one charts its series."""
    from harness.browser import missing_reason, open_browser, signed_in_context

    reason = missing_reason()
    if reason:
        pytest.skip(f"page tests need headless Chromium: {reason}")
    with open_browser() as browser:
        page = signed_in_context(browser, cluster.url, cluster.token).new_page()
        page.goto(f"{cluster.url}/ui/#/trials/{staged_trial}")
        page.wait_for_function(f"document.body.dataset.ready === '#/trials/{staged_trial}'")
        rows = page.locator("#stage-table tr[data-stage]")
        assert [rows.nth(i).get_attribute("data-stage") for i in range(rows.count())] == [
            "fit", "student", "baseline"]
        assert "yes" in page.text_content("#stage-table tr[data-stage='student']")

        def validation_points() -> int:
            return page.evaluate("""() => {
                const u = window.detCharts['chart-loss'];
                const i = u.series.findIndex(s => s.label === 'validation: val_loss');
                return u.data[i].filter(v => v != null).length; }""")

        assert validation_points() == 2  # the default stage (the teacher): 2 epochs
        page.select_option("#stage", "student")
        page.wait_for_function("""() => { const u = window.detCharts['chart-loss'];
            const i = u.series.findIndex(s => s.label === 'validation: val_loss');
            return u.data[i].filter(v => v != null).length === 3; }""")
        page.select_option("#stage", "baseline")
        page.wait_for_function("""() => { const u = window.detCharts['chart-loss'];
            const i = u.series.findIndex(s => s.label === 'validation: val_loss');
            return u.data[i].filter(v => v != null).length === 1; }""")
        assert validation_points() == 1
        page.context.close()
