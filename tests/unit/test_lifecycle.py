"""The lifecycle's tables and pure functions (issue 11): fast, no processes.

The same rules run end to end in test_master_lifecycle.py and, in random orders, in
test_lifecycle_stateful.py.
"""

from __future__ import annotations

import doctest
import importlib

import pytest

from det_sdk.master.errors import IllegalTransition
from det_sdk.master.lifecycle import (
    EXPERIMENT_TRANSITIONS,
    REPORTING_STATES,
    TRIAL_TRANSITIONS,
    ExperimentEvent,
    ExperimentState,
    TrialEvent,
    TrialState,
    exit_event,
    next_experiment_state,
    next_trial_state,
    settle,
)

T, E, X = TrialState, TrialEvent, ExperimentState
ENDED = (T.COMPLETED, T.CANCELED, T.ERROR)


def test_an_ended_trial_runs_again_only_when_continued() -> None:
    for (state, event), new in TRIAL_TRANSITIONS.items():
        if state in ENDED:
            assert new is (T.QUEUED if event is E.CONTINUED else state), (state, event)
    for state in X:  # det e continue: an ended experiment only, ACTIVE again
        new = EXPERIMENT_TRANSITIONS.get((state, ExperimentEvent.CONTINUE))
        ended = state in (X.COMPLETED, X.CANCELED, X.ERROR)
        assert new is (X.ACTIVE if ended else None), state


@pytest.mark.parametrize("state", list(T))
def test_every_state_answers_every_user_command_or_refuses_it_loudly(state: TrialState) -> None:
    for event in (E.PAUSE, E.ACTIVATE, E.KILL):
        assert (state, event) in TRIAL_TRANSITIONS or state is T.STOPPING_CANCELED


def test_events_not_in_the_table_are_refused() -> None:
    with pytest.raises(IllegalTransition, match="a COMPLETED trial 3 cannot be reported"):
        next_trial_state(T.COMPLETED, E.REPORTED, 3)
    with pytest.raises(IllegalTransition, match="QUEUED trial 4 cannot be exited done"):
        next_trial_state(T.QUEUED, E.EXITED_DONE, 4)
    with pytest.raises(IllegalTransition, match="STOPPING_CANCELED experiment 2 cannot be "
                                                "activated"):
        next_experiment_state(X.STOPPING_CANCELED, ExperimentEvent.ACTIVATE, 2)
    with pytest.raises(IllegalTransition):
        next_experiment_state(X.COMPLETED, ExperimentEvent.PAUSE)


def test_only_trials_with_a_process_report() -> None:
    assert {T.RUNNING, T.STOPPING_PAUSED, T.STOPPING_CANCELED} == REPORTING_STATES


@pytest.mark.parametrize(
    ("state", "event", "expected"),
    [
        # L1: activate while stopping: it keeps stopping, and is PAUSED (then requeued by
        # the ACTIVE experiment) once its process has exited
        (T.STOPPING_PAUSED, E.ACTIVATE, T.STOPPING_PAUSED),
        (T.STOPPING_PAUSED, E.EXITED_STOPPED, T.PAUSED),
        # L2: finished before it saw the pause
        (T.STOPPING_PAUSED, E.EXITED_DONE, T.COMPLETED),
        # L4: launch failures end the trial; a killed one whose process never started or
        # died with the master ends CANCELED
        (T.RUNNING, E.LAUNCH_FAILED, T.ERROR),
        (T.STOPPING_CANCELED, E.LAUNCH_FAILED, T.CANCELED),
        (T.STOPPING_CANCELED, E.MASTER_RESTARTED, T.CANCELED),
        (T.RUNNING, E.MASTER_RESTARTED, T.QUEUED),
        (T.RUNNING, E.EXITED_FAILED, T.QUEUED),
        (T.RUNNING, E.EXITED_FAILED_FINAL, T.ERROR),
        (T.PAUSED, E.ACTIVATE, T.QUEUED),
        (T.PAUSED, E.KILL, T.CANCELED),
    ],
)
def test_the_transitions_the_issue_names(state: TrialState, event: TrialEvent,
                                         expected: TrialState) -> None:
    assert next_trial_state(state, event) is expected


@pytest.mark.parametrize(
    ("state", "trials", "expected"),
    [
        (X.STOPPING_PAUSED, [T.STOPPING_PAUSED], X.STOPPING_PAUSED),
        (X.STOPPING_PAUSED, [T.PAUSED, T.PAUSED], X.PAUSED),
        (X.STOPPING_PAUSED, [T.COMPLETED], X.COMPLETED),
        (X.PAUSED, [T.COMPLETED, T.ERROR], X.COMPLETED),
        (X.ACTIVE, [T.ERROR, T.ERROR], X.ERROR),
        (X.ACTIVE, [T.CANCELED], X.CANCELED),
        (X.STOPPING_CANCELED, [T.STOPPING_CANCELED, T.CANCELED], X.STOPPING_CANCELED),
        (X.STOPPING_CANCELED, [T.COMPLETED, T.CANCELED], X.CANCELED),
        (X.COMPLETED, [T.QUEUED], X.COMPLETED),
    ],
)
def test_an_experiment_settles_on_what_its_trials_are(state: ExperimentState, trials: list,
                                                      expected: ExperimentState) -> None:
    assert settle(state, trials) is expected


def test_experiment_commands() -> None:
    assert EXPERIMENT_TRANSITIONS[(X.ACTIVE, ExperimentEvent.PAUSE)] is X.STOPPING_PAUSED
    assert EXPERIMENT_TRANSITIONS[(X.STOPPING_PAUSED, ExperimentEvent.ACTIVATE)] is X.ACTIVE
    assert EXPERIMENT_TRANSITIONS[(X.COMPLETED, ExperimentEvent.KILL)] is X.COMPLETED


def test_exits_are_classified() -> None:
    assert exit_event(0, True, 0, 1) is E.EXITED_DONE
    assert exit_event(0, False, 0, 1) is E.EXITED_STOPPED
    assert exit_event(-9, False, 0, 1) is E.EXITED_FAILED
    assert exit_event(137, True, 1, 1) is E.EXITED_FAILED_FINAL


@pytest.mark.parametrize("name", ["det_sdk.master.lifecycle", "det_sdk.master.errors",
                                  "det_sdk.master.checkpoints", "det_sdk.master.search",
                                  "det_sdk.master.archive", "det_sdk.api"])
def test_docstring_examples_of_the_master_modules(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
