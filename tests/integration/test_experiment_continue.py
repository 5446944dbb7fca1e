"""What `det e continue` does to a master and what it refuses (issue 48): a real ``Master``
on a real SQLite file, in this process; the trials' processes are played by the
lifecycle's events (launched, checkpointed, searcher operation completed, exited). The
real CLI against a running master with a real trial: tests/e2e/test_cli_determined.py.
"""

from __future__ import annotations

import base64
import uuid as uuidlib
from pathlib import Path
from typing import Any

import pytest

from det_sdk.master.archive import pack
from det_sdk.master.core import Master
from det_sdk.master.errors import Conflict, InvalidRequest
from det_sdk.master.experiment_admin import ExperimentAdmin
from det_sdk.master.experiment_continue import continue_experiment
from det_sdk.master.lifecycle import TrialEvent

pytestmark = pytest.mark.stack_neutral


def _master(tmp_path: Path, searcher: dict[str, Any],
            hparams: dict[str, Any] | None = None) -> tuple[Master, int]:
    master = Master(tmp_path / "m", slots=1, url="http://127.0.0.1:1")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "train.py").write_text("print('hi')\n")
    config = {"entrypoint": "python3 train.py", "searcher": searcher,
              "hyperparameters": hparams or {}}
    exp = master.create_experiment(config, base64.b64encode(pack(tmp_path / "model")).decode())
    return master, exp


def _run(master: Master, trial: int, epochs: int, checkpoint: bool = True) -> str | None:
    """The trial's process: launched, trains to ``epochs``, checkpoints, validates."""
    master.lifecycle.trial_event(trial, TrialEvent.SCHEDULED)
    uuid = None
    if checkpoint:
        uuid = str(uuidlib.uuid4())
        master.report_checkpoint({"trial_id": trial, "uuid": uuid, "steps_completed": epochs,
                                  "epoch": epochs, "metrics": {}})
    master.complete_operation(trial, "epochs", epochs, 0.5)
    return uuid


def _exit(master: Master, trial: int, event: TrialEvent) -> None:
    master.lifecycle.trial_event(trial, event)


def test_a_completed_single_trial_trains_further_with_the_same_ids(tmp_path: Path) -> None:
    master, exp = _master(tmp_path, {"name": "single", "metric": "val_loss",
                                     "max_length": {"epochs": 2}})
    trial = master.store.trials(exp)[0]["id"]
    with pytest.raises(Conflict, match=r"is ACTIVE: only an ended experiment"):
        continue_experiment(master, exp, {"searcher": {"max_length": {"epochs": 4}}})
    uuid = _run(master, trial, 2)
    _exit(master, trial, TrialEvent.EXITED_DONE)
    assert master.experiment_state(exp) == "COMPLETED"
    archive = Path(master.store.experiment(exp)["archive"])  # type: ignore[index]
    assert archive.is_file()  # kept after the end: continue unpacks it again
    Master(tmp_path / "m", slots=1, url="http://127.0.0.1:1")._sweep_uploads()
    assert archive.is_file()  # a restarted master's sweep keeps it too

    refusals = [
        ({"searcher": {"max_length": {"epochs": 2}}}, "trained to 2 epochs; .* larger"),
        ({"searcher": {"max_length": {"epochs": 1}}}, "larger length"),
        ({"searcher": {"max_length": {"batches": 500}}}, "trained in epochs; give"),
        ({"searcher": {"name": "random", "max_trials": 2}}, "must keep the single searcher"),
        ({"project": "p"}, "project: cannot be given"),
        ({}, "trained to 2 epochs; continue trains further"),  # nothing asked
        ({"searcher": {"max_length": {"epochs": 0}}}, "max_length"),  # the config's check
    ]
    for override, message in refusals:
        with pytest.raises(InvalidRequest, match=message):
            continue_experiment(master, exp, override)
    assert master.experiment_state(exp) == "COMPLETED"  # a refusal changed nothing
    assert master.trial_config(trial).searcher.max_length.epochs == 2  # type: ignore[union-attr]

    out = continue_experiment(master, exp, {"searcher": {"max_length": {"epochs": 4}},
                                            "description": "longer"})
    assert out == {"id": exp, "state": "ACTIVE", "trial_ids": [trial]}
    t = master.trial(trial)
    assert (t["state"], t["restarts"], t["progress"], t["ended"]) == ("QUEUED", 0, 0.0, None)
    assert t["latest_checkpoint"] == uuid  # what its launch resumes from
    assert master.searcher_operation(trial) == {"unit": "epochs", "length": 4,
                                                "completed": False}
    info = master.experiment_info(exp)
    assert info["config"]["searcher"]["max_length"]["epochs"] == 4
    assert info["config"]["description"] == "longer"
    assert [x["id"] for x in info["trials"]] == [trial]  # no new trial, no new experiment
    assert len(master.store.experiments()) == 1

    # the continued run trains on to 4 epochs and completes; deleting removes the upload
    _run(master, trial, 4)
    assert master.searcher_operation(trial)["completed"]  # type: ignore[index]
    _exit(master, trial, TrialEvent.EXITED_DONE)
    assert master.experiment_state(exp) == "COMPLETED"
    assert master.wait_disk_work()
    ExperimentAdmin(master).delete_experiment(exp)
    assert not archive.exists()


def test_an_errored_single_trial_is_recovered_at_its_length(tmp_path: Path) -> None:
    master, exp = _master(tmp_path, {"name": "single", "metric": "val_loss",
                                     "max_length": {"epochs": 3}},
                          {"lr": {"type": "double", "minval": 0.1, "maxval": 0.2}, "bs": 8})
    trial = master.store.trials(exp)[0]["id"]
    master.lifecycle.trial_event(trial, TrialEvent.SCHEDULED)
    _exit(master, trial, TrialEvent.EXITED_FAILED_FINAL)
    assert master.experiment_state(exp) == "ERROR"
    with pytest.raises(InvalidRequest, match="was to 3 epochs"):
        continue_experiment(master, exp, {"searcher": {"max_length": {"epochs": 2}}})
    drawn = master.trial(trial)["hparams"]
    out = continue_experiment(master, exp)  # no override: Determined's recovery
    assert out["state"] == "ACTIVE" and master.trial(trial)["state"] == "QUEUED"
    assert master.trial(trial)["hparams"] == drawn
    # a new constant: the continued trial gets it; the ranged one drawn as before
    master.lifecycle.trial_event(trial, TrialEvent.SCHEDULED)
    _exit(master, trial, TrialEvent.EXITED_FAILED_FINAL)
    continue_experiment(master, exp, {"hyperparameters": {"bs": 16}})
    assert master.trial(trial)["hparams"] == {**drawn, "bs": 16}


def test_a_grid_search_reruns_only_its_unfinished_trials(tmp_path: Path) -> None:
    master, exp = _master(tmp_path, {"name": "grid", "metric": "val_loss",
                                     "max_length": {"epochs": 1}},
                          {"lr": {"type": "categorical", "vals": [0.1, 0.2, 0.3]}})
    done, failed, killed = (t["id"] for t in master.store.trials(exp))
    _run(master, done, 1, checkpoint=False)
    _exit(master, done, TrialEvent.EXITED_DONE)
    master.lifecycle.trial_event(failed, TrialEvent.SCHEDULED)
    _exit(master, failed, TrialEvent.EXITED_FAILED_FINAL)
    master.lifecycle.trial_event(killed, TrialEvent.KILL)
    assert master.experiment_state(exp) == "COMPLETED"  # one completed: Determined continues it
    with pytest.raises(InvalidRequest, match="only a single-searcher experiment takes"):
        continue_experiment(master, exp, {"searcher": {"max_length": {"epochs": 2}}})
    out = continue_experiment(master, exp)
    assert sorted(out["trial_ids"]) == sorted([failed, killed])
    assert [master.trial(t)["state"] for t in (done, failed, killed)] == \
        ["COMPLETED", "QUEUED", "QUEUED"]

    for t in (failed, killed):
        _run(master, t, 1, checkpoint=False)
        _exit(master, t, TrialEvent.EXITED_DONE)
    assert master.experiment_state(exp) == "COMPLETED"
    with pytest.raises(Conflict, match="every trial of its grid search COMPLETED"):
        continue_experiment(master, exp)


def test_other_searchers_are_refused(tmp_path: Path) -> None:
    master, exp = _master(tmp_path, {"name": "adaptive_asha", "metric": "val_loss",
                                     "max_length": {"epochs": 4}, "max_trials": 2},
                          {"lr": {"type": "double", "minval": 0.1, "maxval": 0.2}})
    master.kill_experiment(exp)
    assert master.experiment_state(exp) == "CANCELED"
    with pytest.raises(InvalidRequest, match="'adaptive_asha'; only a single, grid or random"):
        continue_experiment(master, exp)
