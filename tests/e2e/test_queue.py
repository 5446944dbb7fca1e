"""The queue by priority (issue 59, item 5): ``resources.priority``, ``det job list``'s order,
``det job update --priority``, ``det e set priority|max-slots``, and preemption of
lower-priority trials through the pause path, on a real 2-slot master with TensorFlow-free
trials (``tests/lifecycle_trial``) that do exactly what each test tells them.

Each test ends what it started, so that the module's one master is empty for the next.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from harness.master import Cluster, create, describe, trial_logs, wait_until
from tests.lifecycle_harness import Fakes

pytestmark = pytest.mark.stack_neutral


def _queue(cluster: Cluster) -> list[dict[str, Any]]:
    return list(cluster.det_json("job", "list"))


def _order(cluster: Cluster, exp_ids: list[int]) -> list[int]:
    """The experiments of ``exp_ids`` in the order `det job list` shows them."""
    return [j["id"] for j in _queue(cluster) if j["type"] == "EXPERIMENT" and j["id"] in exp_ids]


def _preempted(fakes: Fakes, trial_id: int) -> bool:
    return bool(fakes.send(trial_id, "preempted")["preempt"])


def _end(fakes: Fakes, *exp_ids: int) -> None:
    """Kill the experiments and wait until each has ended (the master free again)."""
    for exp_id in exp_ids:
        fakes.command(exp_id, "kill")
    for exp_id in exp_ids:
        wait_until(f"experiment {exp_id} to end",
                   lambda e=exp_id: fakes.experiment(e)["state"] in ("CANCELED", "COMPLETED"),
                   timeout=120)


def test_a_higher_priority_preempts_the_lowest_which_resumes_after(
        cluster: Cluster, fakes: Fakes) -> None:
    """On a full 2-slot master, a priority-10 experiment preempts the priority-50 trial (not
    the priority-42 one): it checkpoints and stops, waits QUEUED (not PAUSED) while the
    preemptor runs, and resumes from its checkpoint once the slot is free."""
    mid, mid_trial, _ = fakes.start_trial(name="mid")  # 42, Determined's default
    low, low_trial, low_proc = fakes.start_trial(name="low", resources={"priority": 50})
    fakes.send(low_trial, "report")
    fakes.send(low_trial, "checkpoint")
    assert not _preempted(fakes, low_trial)
    high = fakes.create(name="high", resources={"priority": 10})
    high_trial = fakes.trial_of(high)["id"]
    wait_until("the priority-50 trial to be asked to stop",
               lambda: _preempted(fakes, low_trial), timeout=120, every=0.2)
    assert not _preempted(fakes, mid_trial)  # 42 < 50: the lowest goes, and only it
    # the queue in the order it runs: priority first, whatever the submission order
    assert _order(cluster, [mid, low, high]) == [high, mid, low]
    table = cluster.det("job", "list")
    assert table.returncode == 0, table.stderr
    assert table.stdout.index(f"experiment-{high}") < table.stdout.index(f"experiment-{low}")
    fakes.send(low_trial, "exit0")  # it obeys, as a paused trial does
    fakes.wait_started(high_trial)
    exp = fakes.experiment(low)
    assert (exp["state"], exp["trials"][0]["state"]) == ("ACTIVE", "QUEUED")  # not PAUSED
    assert fakes.running_allocation(low_trial) is None  # not restarted beside its preemptor
    fakes.send(high_trial, "finish")
    fakes.wait_state(high, "COMPLETED", "COMPLETED")
    again = fakes.wait_started(low_trial, after=low_proc["allocation"], timeout=120)
    assert again["resumed_from"] == 1  # from the checkpoint it took when preempted
    assert not _preempted(fakes, low_trial)
    fakes.send(low_trial, "finish")
    fakes.wait_state(low, "COMPLETED", "COMPLETED")
    assert fakes.trial_of(low)["restarts"] == 0  # a preemption is no failure
    _end(fakes, mid)


def test_a_preempted_trial_killed_during_its_pause_ends_canceled(
        cluster: Cluster, fakes: Fakes) -> None:
    a, a_trial, _ = fakes.start_trial(name="a", resources={"priority": 60})
    b, b_trial, _ = fakes.start_trial(name="b", resources={"priority": 60})
    high = fakes.create(name="urgent", resources={"priority": 1})
    # equal priorities: the newest goes first
    wait_until("trial b to be asked to stop", lambda: _preempted(fakes, b_trial),
               timeout=120, every=0.2)
    assert not _preempted(fakes, a_trial)
    # a kill stops its process now (it does not wait for the pause's checkpoint)
    assert fakes.command(b, "kill")["state"] in ("STOPPING_CANCELED", "CANCELED")
    fakes.wait_state(b, "CANCELED", "CANCELED", timeout=120)
    assert fakes.running_allocation(b_trial) is None
    fakes.wait_started(fakes.trial_of(high)["id"])
    assert fakes.trial_of(a)["state"] == "RUNNING"
    _end(fakes, a, high)


def test_job_update_and_e_set_priority_reorder_the_queue(cluster: Cluster,
                                                         fakes: Fakes) -> None:
    """Behind two priority-1 trials (never preempted), x and y wait in submission order
    until `det job update` and `det e set priority` reorder them; the first in the queue
    starts first when a slot frees."""
    b1, b1_trial, _ = fakes.start_trial(name="blocker", resources={"priority": 1})
    b2, _b2_trial, _ = fakes.start_trial(name="blocker", resources={"priority": 1})
    x = fakes.create(name="x")
    y = fakes.create(name="y")
    assert _order(cluster, [x, y]) == [x, y]
    out = cluster.det("job", "update", f"experiment-{y}", "--priority", "30")
    assert out.returncode == 0, out.stderr
    assert _order(cluster, [x, y]) == [y, x]
    rows = {j["id"]: j for j in _queue(cluster) if j["type"] == "EXPERIMENT"}
    assert (rows[y]["priority"], rows[x]["priority"]) == (30, 42)
    out = cluster.det("e", "set", "priority", str(x), "20")
    assert out.returncode == 0, out.stderr
    assert _order(cluster, [x, y]) == [x, y]
    # careless input: out of range, not a number, an unknown id; nothing changes
    bad = cluster.det("job", "update", str(x), "--priority", "100")
    assert bad.returncode != 0 and "priority" in bad.stderr
    bad = cluster.det("e", "set", "priority", str(x), "0")
    assert bad.returncode != 0 and "priority" in bad.stderr
    bad = cluster.det("job", "update", "nonsense-x", "--priority", "5")
    assert bad.returncode != 0 and "job id" in bad.stderr
    assert cluster.det("e", "set", "priority", "99999", "5").returncode != 0
    assert fakes.experiment(x)["config"]["resources"]["priority"] == 20
    # one blocker ends: x (20) takes its slot, y (30) waits; priority 1 is never preempted
    fakes.send(b1_trial, "finish")
    fakes.wait_state(b1, "COMPLETED", "COMPLETED")
    fakes.wait_started(fakes.trial_of(x)["id"], timeout=120)
    assert fakes.trial_of(y)["state"] == "QUEUED"
    assert fakes.trial_of(b2)["state"] == "RUNNING"
    _end(fakes, b2, x, y)


def test_max_slots_is_honoured(cluster: Cluster, fakes: Fakes) -> None:
    """An experiment of two trials with max_slots 1 holds one slot on a free 2-slot
    master: a later experiment gets the other (so the scheduler passed it over)."""
    searcher = {"name": "random", "metric": "loss", "max_length": {"batches": 100},
                "max_trials": 2}
    capped = fakes.create(name="capped", searcher=searcher, resources={"max_slots": 1})
    later = fakes.create(name="later")
    fakes.wait_started(fakes.trial_of(later)["id"], timeout=120)
    trials = fakes.experiment(capped)["trials"]
    assert sorted(t["state"] for t in trials) == ["QUEUED", "RUNNING"]
    rows = {j["id"]: j for j in _queue(cluster) if j["type"] == "EXPERIMENT"}
    assert (rows[capped]["acquired"], rows[capped]["needed"]) == (1, 2)
    bad = cluster.det("e", "set", "max-slots", str(capped), "0")
    assert bad.returncode != 0 and "max_slots" in bad.stderr
    _end(fakes, capped, later)


def test_priority_out_of_range_is_refused_naming_the_field(cluster: Cluster,
                                                           fakes: Fakes) -> None:
    with fakes.http() as http:
        r = http.post("/api/v1/experiments", json={
            "config": {"entrypoint": "python3 trial.py", "resources": {"priority": 100}},
            "model_definition": fakes.archive})
    assert r.status_code == 400, r.text
    assert "resources.priority" in r.text


def test_a_preempted_keras_trial_ends_bit_equal_to_one_run_alone(cluster: Cluster,
                                                                 fakes: Fakes) -> None:
    """A real Keras trial (priority 50) preempted mid-epoch by a priority-10 experiment
    checkpoints there, waits, resumes, and ends with weights bit-equal to the same trial
    run alone beside it (priority 42, never preempted)."""
    common = {"searcher": {"name": "single", "metric": "val_loss", "max_length": {"epochs": 3}},
              "reproducibility": {"experiment_seed": 42}}
    # both trials hold a slot until the preemption is seen: the one run alone holds too
    # (at epoch 2), or under load it could end first and free a slot that the high
    # priority takes without preempting anything (seen in a fresh clone's CI run)
    hold, hold_alone = cluster.root / "hold", cluster.root / "hold-alone"
    hold.mkdir()
    hold_alone.mkdir()
    full = create(cluster, cluster.write_config(
        "alone", **common, data={"weights_out": str(cluster.root / "alone.npz"),
                                 "hold_at": [2, 1, str(hold_alone), 600]}))
    low = create(cluster, cluster.write_config(
        "preempted", **common, resources={"priority": 50},
        data={"weights_out": str(cluster.root / "preempted.npz"),
              "hold_at": [1, 3, str(hold)]}))
    wait_until("the low trial to hold mid-epoch", (hold / "reached").exists, timeout=240,
               every=0.2)
    high = fakes.create(name="high", resources={"priority": 10})
    low_trial = describe(cluster, low)["trials"][0]["id"]
    # the log read in this process: a `det trial logs` per poll costs ~0.3 s of CPU
    wait_until("the low trial to hear it must stop", lambda: "asks this trial to stop" in
               trial_logs(cluster, low_trial), timeout=120, every=0.5)
    (hold / "release").write_text("x")
    wait_until("the trial run alone to hold", (hold_alone / "reached").exists, timeout=240,
               every=0.2)
    (hold_alone / "release").write_text("x")
    high_trial = fakes.trial_of(high)["id"]
    fakes.wait_started(high_trial, timeout=120)
    fakes.send(high_trial, "finish")
    fakes.wait_state(high, "COMPLETED", "COMPLETED")
    for exp_id in (full, low):
        assert cluster.det("experiment", "wait", str(exp_id)).returncode == 0
    (trial,) = describe(cluster, low)["trials"]
    assert trial["restarts"] == 0 and trial["steps_completed"] == 30
    assert "det_sdk: preempted for trial" in cluster.det("trial", "logs", str(low_trial)).stdout
    with cluster.http() as http:
        ckpts = http.get(f"/api/v1/trials/{low_trial}/checkpoints").json()
    assert (1, 4) in {(c["epoch"], c["batch"]) for c in ckpts}  # where it was preempted
    a, b = np.load(cluster.root / "alone.npz"), np.load(cluster.root / "preempted.npz")
    assert list(a) == list(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
