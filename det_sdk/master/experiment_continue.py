"""Determined's ``det experiment continue``: an ended experiment trains further, same ids.

As Determined 0.38's master does it (``ContinueExperiment``): only an ended experiment
(COMPLETED, CANCELED, ERROR) is continued; a single-searcher experiment takes an
override config merged over its active config (a new ``searcher.max_length``, most
often) and its trial is queued again, to resume from its latest checkpoint; a grid or
random search takes no override and re-runs its trials that did not complete (refused
when all did). The experiment and trial keep their ids; the trial's restarts, progress
and searcher state start over; given ``hyperparameters``, its hyperparameters are the
new config's (drawn with the experiment's seed, as Determined's new search draws them).
Other searchers are refused, as Determined refuses them.

Refused as Determined refuses them: a changed searcher name, ``project``/``workspace``.
Refused by det_sdk only, where Determined would run a trial that does nothing useful: a
``max_length`` shorter than the one trained to, or (for a completed trial) not longer,
or in another unit.

The experiment's uploaded model directory is what the trial unpacks again: the master
keeps it until the experiment is deleted (``det e delete``).

>>> merged_config({"searcher": {"name": "single", "max_length": {"epochs": 3,
...                "batches": None}}}, {"searcher": {"max_length": {"epochs": 5}}})
{'searcher': {'name': 'single', 'max_length': {'epochs': 5}}}
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from det_sdk.master.errors import Conflict, InvalidRequest, NotFound
from det_sdk.master.search import planned_trials
from det_sdk.master.searchers import rung_lengths
from det_sdk.master.task_files import kept_marker

__all__ = ["CONTINUABLE_SEARCHERS", "continue_experiment", "merged_config"]

ENDED = ("COMPLETED", "CANCELED", "ERROR")
#: Determined's continue takes these searchers (others: "Unsupported searcher type")
CONTINUABLE_SEARCHERS = ("single", "grid", "random")
#: config keys replaced whole, never merged: a length is one of epochs / batches / records
_LEAVES = ("max_length", "min_validation_period", "min_checkpoint_period")


def merged_config(active: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` over ``active``, mappings merged key by key (Determined's merge of
    an override config), a length replaced whole."""
    out = dict(active)
    for key, value in override.items():
        old = out.get(key)
        if isinstance(value, dict) and isinstance(old, dict) and key not in _LEAVES:
            out[key] = merged_config(old, value)
        else:
            out[key] = value
    return out


def continue_experiment(master: Any, exp_id: int,
                        override: dict[str, Any] | None = None) -> dict[str, Any]:
    """Continue experiment ``exp_id`` (a ``det_sdk.master.core.Master``'s) with
    ``override`` merged into its config; returns ``{"id", "state", "trial_ids"}`` (the
    trials queued again). Refusals: :class:`Conflict` (its state, its trials, its upload
    gone), :class:`InvalidRequest` (the searcher, the override)."""
    from det_sdk.master.core import experiment_config

    override = dict(override or {})
    exp = _ended_experiment(master, exp_id)
    active = dict(exp["config"])
    name = (active.get("searcher") or {}).get("name")
    if name not in CONTINUABLE_SEARCHERS:
        raise InvalidRequest(f"searcher.name: experiment {exp_id}'s searcher is {name!r}; "
                             "only a single, grid or random searcher's experiment can be "
                             "continued (as in Determined)")
    for key in ("project", "workspace"):
        if key in override:
            raise InvalidRequest(f"{key}: cannot be given to continue (det_sdk has no "
                                 "workspaces or projects)")
    if name != "single" and override:
        raise InvalidRequest(f"override config: experiment {exp_id}'s searcher is {name!r}; "
                             "only a single-searcher experiment takes a new config (a grid "
                             "or random search's continue re-runs its unfinished trials as "
                             "they were)")
    try:
        merged = merged_config(active, override)
    except RecursionError:
        raise InvalidRequest("override config: nested too deeply") from None
    config = experiment_config(merged)
    new_name = config.searcher.name if config.searcher else None
    if new_name != name:
        raise InvalidRequest(f"searcher.name: the override config must keep the {name} "
                             f"searcher, got {new_name!r}")
    trials = master.store.trials(exp_id)
    if name == "single":
        again = trials
        _check_length(exp_id, master.trial_config(trials[0]["id"]), config, trials[0],
                      bool(override))
    else:
        again = [t for t in trials if t["state"] != "COMPLETED"]
        if not again:
            raise Conflict(f"experiment {exp_id} has been completed, cannot continue this "
                           f"experiment: every trial of its {name} search COMPLETED")
    if not Path(exp["archive"]).is_file():
        raise Conflict(f"experiment {exp_id}'s uploaded model directory is gone (a master "
                       "before det e continue deleted it when the experiment ended): create "
                       "a new experiment whose script loads the checkpoint")
    # an ended trial's working directory is cleared (its files kept) in the disk-work
    # thread: done before it is unpacked again
    if not master.wait_disk_work(60.0):
        raise Conflict(f"experiment {exp_id}'s ended trials' files are still being kept: "
                       "try again in a minute")
    ids = [t["id"] for t in again]
    fields: dict[str, Any] = {"restarts": 0, "progress": 0.0, "searcher_done": 0}
    if name == "single":  # the length it trains to now: the new max_length
        fields["target"] = next(iter(rung_lengths(config)), None)
        if "hyperparameters" in override:  # Determined launches it with the new search's
            seed = config.reproducibility.experiment_seed
            fields["hparams"] = planned_trials(config, seed or 0)[0]["hparams"]
    with master.lifecycle.lock:
        _ended_experiment(master, exp_id)  # still ended: nothing ran in between
        master.replace_config(exp_id, config)
        for trial_id in ids:  # its next end keeps the files of this run too
            with contextlib.suppress(OSError):
                kept_marker(master.files_path("trials", trial_id)).unlink()
        state = master.lifecycle.continue_experiment(exp_id, ids, **fields)
    return {"id": exp_id, "state": state.value, "trial_ids": ids}


def _ended_experiment(master: Any, exp_id: int) -> dict[str, Any]:
    exp = master.store.experiment(exp_id)
    if exp is None:
        raise NotFound(f"no experiment {exp_id}")
    if exp["state"] not in ENDED:
        raise Conflict(f"experiment {exp_id} is {exp['state']}: only an ended experiment "
                       "(COMPLETED, CANCELED, ERROR) can be continued; wait until it ends "
                       "(det e wait), or pause and activate it")
    return dict(exp)


def _check_length(exp_id: int, old_config: Any, new_config: Any, trial: Any,
                  overridden: bool) -> None:
    """A single trial trains further: a length in the same unit, not shorter, and longer
    when it completed the old one."""
    old = old_config.searcher.max_length
    new = new_config.searcher.max_length
    completed = trial["state"] == "COMPLETED"
    if old is not None and new is not None:
        example = f"--config searcher.max_length.{old.unit}={old.value * 2}"
        if new.unit != old.unit:
            raise InvalidRequest(f"searcher.max_length: trial {trial['id']} trained in "
                                 f"{old.unit}; give the new length in {old.unit}, e.g. "
                                 f"{example}")
        if new.value < old.value or (completed and new.value == old.value):
            raise InvalidRequest(
                f"searcher.max_length: trial {trial['id']} {'trained' if completed else 'was'}"
                f" to {old.value} {old.unit}; continue trains further: give a larger length,"
                f" e.g. {example}")
    elif completed and not overridden:
        raise InvalidRequest(f"override config: experiment {exp_id}'s trial completed and "
                             "nothing was changed; give a new length, e.g. --config "
                             "searcher.max_length.epochs=N")
