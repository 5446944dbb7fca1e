"""Several fits in one script (issue 28): each ``context.fit`` is a stage of the run with
its own checkpoints, metrics and best; ``DET_RESUME`` resumes the stage that stopped and
restores the finished ones from their last checkpoints.

The script: a teacher (the first fit, unnamed: the default stage ``fit``), a student
trained on the teacher's outputs (``stage="student"``), then a baseline on the true
targets (unnamed: ``fit-3``).

This module's other half, the tests that start no process: tests/integration/test_stages.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness.master import create, trial_logs, wait_until
from tests.e2e.test_horovod import HOROVODRUN, horovodrun
from tests.support import SCRIPTS, read_jsonl

#: the staged trial at its pause: its state, its log and its stages then
paused_in_the_baseline: dict = {}


@pytest.fixture(scope="module")
def staged_trial(cluster) -> int:
    """A finished trial on a real master (1 slot) whose script has three stages, the
    student searched; it crashed once in the student stage, and was paused in the middle
    of the baseline (after the searched stage) and activated. Its id; what the pause left
    is in ``paused_in_the_baseline``. (One trial for both stories: each trial launched is
    a TensorFlow process.)"""
    hold = cluster.root / "stages-hold"
    hold.mkdir()
    config = cluster.write_config(
        "stages", searcher={"name": "single", "metric": "val_loss",
                            "max_length": {"epochs": 3}},
        # the baseline holds after its third batch until the trial has heard the pause
        data={"teacher_epochs": 2, "baseline_epochs": 1, "crash_in_student_at_epoch": 1,
              "baseline_hold": str(hold)},
        resources={"slots_per_trial": 1}, checkpoint_storage={"save_trial_latest": 1,
                                                              "save_trial_best": 0})
    exp_id = create(cluster, config, Path(__file__).parents[1] / "stages_model")
    with cluster.http() as http:
        def trial():
            exp = http.get(f"/api/v1/experiments/{exp_id}").json()
            return exp["trials"][0] if exp["trials"] else None

        wait_until("the baseline's held batch", (hold / "reached").exists, timeout=300,
                   every=0.2)
        assert cluster.det("experiment", "pause", str(exp_id)).returncode == 0
        trial_id = trial()["id"]
        wait_until("the trial to hear the pause",
                   lambda: "asks this trial to stop" in trial_logs(cluster, trial_id),
                   timeout=60)
        (hold / "release").write_text("x")
        t = wait_until("the trial to stop", lambda: (t := trial())["state"] in (
            "PAUSED", "COMPLETED", "ERROR", "CANCELED") and t, timeout=120, every=0.2)
        paused_in_the_baseline.update(
            state=t["state"], logs=cluster.det("trial", "logs", str(trial_id)).stdout,
            stages=http.get(f"/api/v1/trials/{trial_id}").json()["stages"])
        if t["state"] == "PAUSED":
            assert cluster.det("experiment", "activate", str(exp_id)).returncode == 0
        t = wait_until("the trial to end", lambda: (t := trial()) and t["state"] in (
            "COMPLETED", "ERROR", "CANCELED") and t, timeout=300, every=0.5)
    assert t["state"] == "COMPLETED", cluster.det("trial", "logs", str(t["id"])).stdout[-3000:]
    return t["id"]


@pytest.mark.timeout(600)  # the first holds the staged trial's 3 launches and pause
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
        # the restart restored the teacher instead of training it again (the crash waits for
        # the student's first checkpoint to be reported: stages_model/train.py; the log read
        # over HTTP: `det trial logs` is tests/e2e/test_cli_determined.py's; here a det
        # process once printed nothing under CI's load, on Keras 2, and said not why; the
        # API once gave nothing too, on Keras 2 under CI's load: the file on disk is shown
        # beside it, to tell whether the log was empty or its reading was)
        logs = trial_logs(cluster, t["id"])
        on_disk = cluster.data_dir / "trials" / str(t["id"]) / "logs.txt"
        assert "stage 'fit' was finished before the resume" in logs, (
            f"{logs[-3000:]!r}; {on_disk}: "
            f"{on_disk.stat().st_size if on_disk.exists() else 'missing'} bytes, ends "
            f"{on_disk.read_bytes()[-1500:] if on_disk.exists() else b''!r}")

    out = cluster.det("trial", "describe", str(t["id"]))
    assert out.returncode == 0, out.stderr
    assert "STAGE" in out.stdout and "student" in out.stdout and "baseline" in out.stdout
    as_json = json.loads(cluster.det("trial", "describe", str(t["id"]), "--json").stdout)
    assert [s["name"] for s in as_json["stages"]] == ["fit", "student", "baseline"]
    assert {(m.get("stage") or "fit", m["group"]) for m in as_json["metrics"]} >= {
        ("fit", "validation"), ("student", "validation"), ("baseline", "validation")}


def test_a_pause_in_a_fit_after_the_searched_one_pauses_and_activate_finishes_it(
        cluster, staged_trial) -> None:
    """Issue 36: the searcher's work is done (the student) when the baseline is paused; the
    trial acknowledges the stop, so its exit is a pause (it ended COMPLETED with the
    baseline cut short before); activated, it finishes the baseline."""
    paused = paused_in_the_baseline
    assert paused["state"] == "PAUSED", paused
    assert "stopped by the master (pause or kill)" in paused["logs"]
    at_pause = {s["name"]: s for s in paused["stages"]}
    assert at_pause["student"]["state"] == "COMPLETED"  # the searcher's work was done
    # the baseline, the last stage then, cut short by the pause
    assert list(at_pause)[-1] == "baseline" and at_pause["baseline"]["state"] == "PAUSED"
    with cluster.http() as http:
        info = http.get(f"/api/v1/trials/{staged_trial}").json()
    stages = {s["name"]: (s["epoch"], s["state"]) for s in info["stages"]}
    assert stages["baseline"] == (1, "COMPLETED")  # finished, not cut short


def test_stages_under_horovodrun_resume_bit_equal(tmp_path: Path) -> None:
    """`horovodrun -np 2`: SIGTERM to rank 0 in the student stage stops both processes;
    DET_RESUME restores the teacher (both ranks), resumes the student and trains the
    baseline to the same weights as an uninterrupted 2-process run."""
    if not HOROVODRUN.exists():
        pytest.skip("horovodrun not installed")
    script = SCRIPTS / "hvd_stages.py"
    full = horovodrun(script, {"DET_RUNS_DIR": str(tmp_path / "full"),
                               "STAGES_WEIGHTS_OUT": str(tmp_path / "full.npz")})
    assert full.returncode == 0, full.stdout[-3000:] + full.stderr[-3000:]
    runs = str(tmp_path / "stopped")
    stopped = horovodrun(script, {"DET_RUNS_DIR": runs, "STAGES_STOP_AT": "1"})
    assert stopped.returncode == 0, stopped.stdout[-3000:] + stopped.stderr[-3000:]
    stages = [r.get("stage") for r in read_jsonl(Path(runs) / "1" / "checkpoints.jsonl")]
    assert stages[-1] == "student" and "baseline" not in stages
    resumed = horovodrun(script, {"DET_RUNS_DIR": runs, "DET_RESUME": "1",
                                  "STAGES_WEIGHTS_OUT": str(tmp_path / "resumed.npz")})
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "stage 'teacher' was finished before the resume" in resumed.stdout + resumed.stderr
    a, b = np.load(tmp_path / "full.npz"), np.load(tmp_path / "resumed.npz")
    assert sorted(a) == sorted(b) and len(a) == 12
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


# the page renders what the master recorded: the Keras stack is only the workload's
@pytest.mark.stack_neutral
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
