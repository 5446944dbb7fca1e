"""The lifecycle of experiments, trials and jobs: enum states, one table, one function.

Every change of state passes through :meth:`Lifecycle.trial_event`,
:meth:`Lifecycle.experiment_event` or :meth:`Lifecycle.job_event`, which look the
event up in the tables below. An event the table does not list from the current
state is logged and refused (:class:`IllegalTransition`), never silently taken.
The scheduler, the searcher and the checkpoint bookkeeping raise events; none of
them writes a state.

Events of a trial: created (it is born QUEUED), scheduled, launch failed, reported,
checkpointed, exited (classified by :func:`exit_event` into done / stopped / failed
/ failed for good), pause, activate, kill, master restarted (its process did not
survive), adopted (its process did) and continued (Determined's ``det e continue``: an
ended trial queued again, to train further from its latest checkpoint).

The experiment's state says what is true of its trials (:func:`settle`): it is
STOPPING_PAUSED while a trial asked to pause still runs and PAUSED only once none
does, so a script can wait for PAUSED and know that nothing runs. ``activate`` while
trials are still stopping is allowed: each runs again once it has stopped (a PAUSED
trial of an ACTIVE experiment is queued at once).

>>> next_trial_state(TrialState.RUNNING, TrialEvent.PAUSE)
<TrialState.STOPPING_PAUSED: 'STOPPING_PAUSED'>
>>> next_trial_state(TrialState.COMPLETED, TrialEvent.REPORTED)
Traceback (most recent call last):
...
det_sdk.master.errors.IllegalTransition: a COMPLETED trial cannot be reported
>>> settle(ExperimentState.STOPPING_PAUSED, [TrialState.PAUSED, TrialState.COMPLETED])
<ExperimentState.PAUSED: 'PAUSED'>
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from enum import Enum
from typing import Any, TypeVar, cast

from det_sdk.api import AllocationState, ExperimentState, JobState, TrialState
from det_sdk.master.errors import IllegalTransition, NotFound
from det_sdk.master.rows import ExperimentRow, JobRow, TrialRow
from det_sdk.master.store import Store

__all__ = [
    "EXPERIMENT_TRANSITIONS",
    "JOB_TRANSITIONS",
    "REPORTING_STATES",
    "TRIAL_TRANSITIONS",
    "AllocationState",
    "ExperimentEvent",
    "ExperimentState",
    "JobEvent",
    "JobState",
    "Lifecycle",
    "TrialEvent",
    "TrialState",
    "exit_event",
    "next_experiment_state",
    "next_job_state",
    "next_trial_state",
    "settle",
]

log = logging.getLogger("det_sdk.master.lifecycle")


class TrialEvent(str, Enum):
    SCHEDULED = "scheduled"
    LAUNCH_FAILED = "launch failed"
    REPORTED = "reported"
    CHECKPOINTED = "checkpointed"
    EXITED_DONE = "exited done"  # code 0, its training finished
    EXITED_STOPPED = "exited stopped"  # code 0, stopped on request before the end
    EXITED_FAILED = "exited failed"  # non-zero, restarts left
    EXITED_FAILED_FINAL = "exited failed for good"  # non-zero, no restart left
    PAUSE = "paused"
    ACTIVATE = "activated"
    KILL = "killed"
    MASTER_RESTARTED = "master restarted"  # no process of it survived the master
    ADOPTED = "adopted"  # its process survived the master and is watched again
    CONTINUED = "continued"  # det e continue: an ended trial trains further
    # it stopped because the queue gave its slots to a higher priority (det_sdk.master.queue):
    # queued again, not user-PAUSED, to resume from its checkpoint once slots free
    PREEMPTED = "preempted"

    def __str__(self) -> str:
        return self.value


class ExperimentEvent(str, Enum):
    PAUSE = "paused"
    ACTIVATE = "activated"
    KILL = "killed"
    CONTINUE = "continued"  # det e continue (Lifecycle.continue_experiment)

    def __str__(self) -> str:
        return self.value


class JobEvent(str, Enum):
    """A job's events: a trial's, less what only trials have (reports, checkpoints), with
    the same names, so that :func:`exit_event` classifies both (``JobEvent(event.value)``)."""

    SCHEDULED = "scheduled"
    LAUNCH_FAILED = "launch failed"
    EXITED_DONE = "exited done"
    EXITED_STOPPED = "exited stopped"
    EXITED_FAILED = "exited failed"
    EXITED_FAILED_FINAL = "exited failed for good"
    PAUSE = "paused"
    ACTIVATE = "activated"
    KILL = "killed"
    MASTER_RESTARTED = "master restarted"

    def __str__(self) -> str:
        return self.value


T, E = TrialState, TrialEvent
_ENDED = (T.COMPLETED, T.CANCELED, T.ERROR)
_HAS_PROCESS = (T.RUNNING, T.STOPPING_PAUSED, T.STOPPING_CANCELED)

TRIAL_TRANSITIONS: dict[tuple[TrialState, TrialEvent], TrialState] = {
    (T.QUEUED, E.SCHEDULED): T.RUNNING,
    (T.QUEUED, E.PAUSE): T.PAUSED,
    (T.QUEUED, E.ACTIVATE): T.QUEUED,
    (T.QUEUED, E.KILL): T.CANCELED,
    (T.QUEUED, E.MASTER_RESTARTED): T.QUEUED,

    (T.RUNNING, E.REPORTED): T.RUNNING,
    (T.RUNNING, E.CHECKPOINTED): T.RUNNING,
    (T.RUNNING, E.LAUNCH_FAILED): T.ERROR,  # launching again would fail the same way
    (T.RUNNING, E.EXITED_DONE): T.COMPLETED,
    (T.RUNNING, E.EXITED_STOPPED): T.COMPLETED,  # nobody asked it to stop: it is done
    (T.RUNNING, E.EXITED_FAILED): T.QUEUED,  # restarts from its latest checkpoint
    (T.RUNNING, E.EXITED_FAILED_FINAL): T.ERROR,
    (T.RUNNING, E.PAUSE): T.STOPPING_PAUSED,
    (T.RUNNING, E.ACTIVATE): T.RUNNING,
    (T.RUNNING, E.KILL): T.STOPPING_CANCELED,
    (T.RUNNING, E.MASTER_RESTARTED): T.QUEUED,
    (T.RUNNING, E.ADOPTED): T.RUNNING,
    (T.RUNNING, E.PREEMPTED): T.QUEUED,

    (T.STOPPING_PAUSED, E.REPORTED): T.STOPPING_PAUSED,
    (T.STOPPING_PAUSED, E.CHECKPOINTED): T.STOPPING_PAUSED,
    (T.STOPPING_PAUSED, E.LAUNCH_FAILED): T.ERROR,
    (T.STOPPING_PAUSED, E.EXITED_DONE): T.COMPLETED,  # finished before it saw the pause (L2)
    (T.STOPPING_PAUSED, E.EXITED_STOPPED): T.PAUSED,
    (T.STOPPING_PAUSED, E.EXITED_FAILED): T.PAUSED,  # resumes from its checkpoint later
    (T.STOPPING_PAUSED, E.EXITED_FAILED_FINAL): T.ERROR,
    (T.STOPPING_PAUSED, E.PAUSE): T.STOPPING_PAUSED,
    # still stopping: it runs again once stopped (PAUSED under an ACTIVE experiment, L1)
    (T.STOPPING_PAUSED, E.ACTIVATE): T.STOPPING_PAUSED,
    (T.STOPPING_PAUSED, E.KILL): T.STOPPING_CANCELED,
    (T.STOPPING_PAUSED, E.MASTER_RESTARTED): T.PAUSED,
    (T.STOPPING_PAUSED, E.ADOPTED): T.STOPPING_PAUSED,

    (T.STOPPING_CANCELED, E.REPORTED): T.STOPPING_CANCELED,
    (T.STOPPING_CANCELED, E.CHECKPOINTED): T.STOPPING_CANCELED,
    (T.STOPPING_CANCELED, E.LAUNCH_FAILED): T.CANCELED,
    (T.STOPPING_CANCELED, E.EXITED_DONE): T.CANCELED,
    (T.STOPPING_CANCELED, E.EXITED_STOPPED): T.CANCELED,
    (T.STOPPING_CANCELED, E.EXITED_FAILED): T.CANCELED,
    (T.STOPPING_CANCELED, E.EXITED_FAILED_FINAL): T.CANCELED,
    (T.STOPPING_CANCELED, E.KILL): T.STOPPING_CANCELED,
    (T.STOPPING_CANCELED, E.MASTER_RESTARTED): T.CANCELED,
    (T.STOPPING_CANCELED, E.ADOPTED): T.STOPPING_CANCELED,

    (T.PAUSED, E.PAUSE): T.PAUSED,
    (T.PAUSED, E.ACTIVATE): T.QUEUED,
    (T.PAUSED, E.KILL): T.CANCELED,
    (T.PAUSED, E.MASTER_RESTARTED): T.PAUSED,
    # commands to a whole experiment leave its ended trials as they are
    **{(s, e): s for s in _ENDED for e in (E.PAUSE, E.ACTIVATE, E.KILL, E.MASTER_RESTARTED)},
    # det e continue: an ended trial is queued again; it resumes from its latest checkpoint
    **{(s, E.CONTINUED): T.QUEUED for s in _ENDED},
}

# The states in which a trial's process may report (the metric hot path checks the
# state in SQL with this set rather than reading the trial first).
REPORTING_STATES = frozenset(s for (s, e) in TRIAL_TRANSITIONS if e is E.REPORTED)

X, XE = ExperimentState, ExperimentEvent
_EXP_ENDED = (X.COMPLETED, X.CANCELED, X.ERROR)
EXPERIMENT_TRANSITIONS: dict[tuple[ExperimentState, ExperimentEvent], ExperimentState] = {
    (X.ACTIVE, XE.PAUSE): X.STOPPING_PAUSED,
    (X.ACTIVE, XE.ACTIVATE): X.ACTIVE,
    (X.ACTIVE, XE.KILL): X.STOPPING_CANCELED,
    (X.STOPPING_PAUSED, XE.PAUSE): X.STOPPING_PAUSED,
    (X.STOPPING_PAUSED, XE.ACTIVATE): X.ACTIVE,
    (X.STOPPING_PAUSED, XE.KILL): X.STOPPING_CANCELED,
    (X.PAUSED, XE.PAUSE): X.PAUSED,
    (X.PAUSED, XE.ACTIVATE): X.ACTIVE,
    (X.PAUSED, XE.KILL): X.STOPPING_CANCELED,
    (X.STOPPING_CANCELED, XE.KILL): X.STOPPING_CANCELED,
    **{(s, XE.KILL): s for s in _EXP_ENDED},  # killing an ended experiment changes nothing
    # det e continue: only an ended experiment (Determined: "try again later" otherwise)
    **{(s, XE.CONTINUE): X.ACTIVE for s in _EXP_ENDED},
}

J, JE = JobState, JobEvent
_JOB_ENDED = (J.COMPLETED, J.CANCELED, J.ERROR)
# A job's table is a trial's (pause, activate, kill, restarts after a failure) without
# an experiment around it: an activate while it still stops is kept (``reactivate``) and
# taken once it has stopped (Lifecycle.job_event).
JOB_TRANSITIONS: dict[tuple[JobState, JobEvent], JobState] = {
    (J.QUEUED, JE.SCHEDULED): J.RUNNING,
    (J.QUEUED, JE.PAUSE): J.PAUSED,
    (J.QUEUED, JE.ACTIVATE): J.QUEUED,
    (J.QUEUED, JE.KILL): J.CANCELED,
    (J.QUEUED, JE.MASTER_RESTARTED): J.QUEUED,

    (J.RUNNING, JE.LAUNCH_FAILED): J.ERROR,
    (J.RUNNING, JE.EXITED_DONE): J.COMPLETED,
    (J.RUNNING, JE.EXITED_STOPPED): J.COMPLETED,  # nobody asked it to stop: it is done
    (J.RUNNING, JE.EXITED_FAILED): J.QUEUED,  # launched again: it resumes from its progress
    (J.RUNNING, JE.EXITED_FAILED_FINAL): J.ERROR,
    (J.RUNNING, JE.PAUSE): J.STOPPING_PAUSED,
    (J.RUNNING, JE.ACTIVATE): J.RUNNING,
    (J.RUNNING, JE.KILL): J.STOPPING_CANCELED,
    (J.RUNNING, JE.MASTER_RESTARTED): J.QUEUED,  # its process did not survive: again

    (J.STOPPING_PAUSED, JE.LAUNCH_FAILED): J.ERROR,
    (J.STOPPING_PAUSED, JE.EXITED_DONE): J.COMPLETED,  # finished before it saw the pause
    (J.STOPPING_PAUSED, JE.EXITED_STOPPED): J.PAUSED,
    (J.STOPPING_PAUSED, JE.EXITED_FAILED): J.PAUSED,
    (J.STOPPING_PAUSED, JE.EXITED_FAILED_FINAL): J.ERROR,
    (J.STOPPING_PAUSED, JE.PAUSE): J.STOPPING_PAUSED,
    (J.STOPPING_PAUSED, JE.ACTIVATE): J.STOPPING_PAUSED,  # queued again once stopped
    (J.STOPPING_PAUSED, JE.KILL): J.STOPPING_CANCELED,
    (J.STOPPING_PAUSED, JE.MASTER_RESTARTED): J.PAUSED,

    **{(J.STOPPING_CANCELED, e): J.CANCELED
       for e in (JE.LAUNCH_FAILED, JE.EXITED_DONE, JE.EXITED_STOPPED, JE.EXITED_FAILED,
                 JE.EXITED_FAILED_FINAL, JE.MASTER_RESTARTED)},
    (J.STOPPING_CANCELED, JE.KILL): J.STOPPING_CANCELED,

    (J.PAUSED, JE.PAUSE): J.PAUSED,
    (J.PAUSED, JE.ACTIVATE): J.QUEUED,
    (J.PAUSED, JE.KILL): J.CANCELED,
    (J.PAUSED, JE.MASTER_RESTARTED): J.PAUSED,
    **{(s, JE.KILL): s for s in _JOB_ENDED},  # killing an ended job changes nothing
}


_S = TypeVar("_S", bound=Enum)  # a table's states (TrialState, ExperimentState, JobState)
_E = TypeVar("_E", bound=Enum)  # its events


def _next_state(kind: str, table: Mapping[tuple[_S, _E], _S], state: _S, event: _E,
                ident: Any = None) -> _S:
    """The state ``event`` takes ``kind`` ``ident`` (a trial, an experiment, a job) to in
    ``table``; :class:`IllegalTransition` (logged) if the table has no such transition."""
    new = table.get((state, event))
    if new is None:
        what = f"{kind} {ident}" if ident is not None else f"{kind}"
        message = f"a {state.value} {what} cannot be {event.value}"
        log.warning("refused transition: %s", message)
        raise IllegalTransition(message)
    return new


def next_trial_state(state: TrialState | str, event: TrialEvent,
                     trial_id: int | None = None) -> TrialState:
    """The state ``event`` takes a trial to; :class:`IllegalTransition` if not in the table.

    >>> next_trial_state("STOPPING_PAUSED", TrialEvent.EXITED_DONE)
    <TrialState.COMPLETED: 'COMPLETED'>
    """
    return _next_state("trial", TRIAL_TRANSITIONS, TrialState(state), event, trial_id)


def next_experiment_state(state: ExperimentState | str, event: ExperimentEvent,
                          exp_id: int | None = None) -> ExperimentState:
    """The state a user command takes an experiment to (before :func:`settle`).

    >>> next_experiment_state("STOPPING_PAUSED", ExperimentEvent.ACTIVATE)
    <ExperimentState.ACTIVE: 'ACTIVE'>
    """
    return _next_state("experiment", EXPERIMENT_TRANSITIONS, ExperimentState(state), event, exp_id)


def next_job_state(state: JobState | str, event: JobEvent, job_id: int | None = None) -> JobState:
    """The state ``event`` takes a job to; :class:`IllegalTransition` if not in the table.

    >>> next_job_state("RUNNING", JobEvent.PAUSE)
    <JobState.STOPPING_PAUSED: 'STOPPING_PAUSED'>
    """
    return _next_state("job", JOB_TRANSITIONS, JobState(state), event, job_id)


def settle(state: ExperimentState | str, trials: Iterable[TrialState | str]) -> ExperimentState:
    """The experiment's state once its trials' states are known (what is true now).

    >>> settle("ACTIVE", ["COMPLETED", "ERROR"])
    <ExperimentState.COMPLETED: 'COMPLETED'>
    >>> settle("STOPPING_CANCELED", ["CANCELED", "COMPLETED"])
    <ExperimentState.CANCELED: 'CANCELED'>
    >>> settle("STOPPING_PAUSED", ["STOPPING_PAUSED", "PAUSED"])
    <ExperimentState.STOPPING_PAUSED: 'STOPPING_PAUSED'>
    """
    state = ExperimentState(state)
    trials = [TrialState(t) for t in trials]
    if state in _EXP_ENDED or not trials:
        return state
    if all(t in _ENDED for t in trials):
        if state is X.STOPPING_CANCELED or all(t is T.CANCELED for t in trials):
            return X.CANCELED
        return X.COMPLETED if T.COMPLETED in trials else X.ERROR
    if state is X.STOPPING_PAUSED and not any(t in _HAS_PROCESS for t in trials):
        return X.PAUSED
    return state


def exit_event(code: int, finished: bool, restarts: int, max_restarts: int) -> TrialEvent:
    """Classify a trial's (or, as ``JobEvent(event.value)``, a job's) process's exit.

    ``finished``: the trial had completed its searcher work (or reported progress 1.0)
    before it exited, so a code 0 is the end of training, not a stop on request.

    >>> exit_event(0, finished=False, restarts=0, max_restarts=5)
    <TrialEvent.EXITED_STOPPED: 'exited stopped'>
    >>> exit_event(1, finished=False, restarts=5, max_restarts=5)
    <TrialEvent.EXITED_FAILED_FINAL: 'exited failed for good'>
    """
    if code == 0:
        return E.EXITED_DONE if finished else E.EXITED_STOPPED
    return E.EXITED_FAILED if restarts < max_restarts else E.EXITED_FAILED_FINAL


class Lifecycle:
    """Applies events to the store: the only writer of experiment, trial and job states.

    ``on_trial_ended(trial)``, ``on_experiment_ended(experiment)`` and
    ``on_job_ended(job)`` run (under the lock) when one reaches a final state (cleanup);
    ``on_stop_requested()`` when trials or jobs are asked to stop (wakes the preemption
    long-polls); ``on_runnable()`` when a trial or job may be scheduled.
    """

    def __init__(
        self,
        store: Store,
        lock: threading.RLock,
        on_trial_ended: Callable[[TrialRow], None] = lambda t: None,
        on_experiment_ended: Callable[[ExperimentRow], None] = lambda e: None,
        on_stop_requested: Callable[[], None] = lambda: None,
        on_runnable: Callable[[], None] = lambda: None,
        on_job_ended: Callable[[JobRow], None] = lambda j: None,
    ) -> None:
        self.store = store
        self.lock = lock
        self.on_trial_ended = on_trial_ended
        self.on_experiment_ended = on_experiment_ended
        self.on_stop_requested = on_stop_requested
        self.on_runnable = on_runnable
        self.on_job_ended = on_job_ended
        # an experiment's new state, with its row (webhooks' triggers: det_sdk.master.webhooks)
        self.on_experiment_state: Callable[[ExperimentRow], None] = lambda e: None

    # --- trials ---------------------------------------------------------------------------

    def trial_event(self, trial_id: int, event: TrialEvent, settle_experiment: bool = True,
                    **fields: Any) -> TrialState:
        """Apply ``event`` to a trial (and write ``fields`` with it); returns the new state.

        The experiment's state follows (:func:`settle`) unless ``settle_experiment`` is False: a
        command to a whole experiment settles it once, after all its trials.

        >>> # lifecycle.trial_event(7, TrialEvent.KILL)
        """
        with self.lock:
            t = self.store.trial(trial_id)
            if t is None:
                raise NotFound(f"no trial {trial_id}")
            old = TrialState(t["state"])
            new = next_trial_state(old, event, trial_id)
            if event is E.EXITED_FAILED and new in (T.QUEUED, T.PAUSED):
                fields["restarts"] = t["restarts"] + 1
            if new is T.COMPLETED:
                fields.setdefault("progress", 1.0)
            if new is not old:
                fields["state"] = new.value
            if fields:
                self.store.update_trial(trial_id, **fields)
            if new is not old:
                log.info("trial %s: %s -> %s (%s)", trial_id, old.value, new.value, event.value)
                if new in _ENDED:  # the row with updated columns is still a TrialRow
                    self.on_trial_ended(cast(TrialRow, {**t, **fields}))
                if new in (T.STOPPING_PAUSED, T.STOPPING_CANCELED):
                    self.on_stop_requested()
                if new is T.QUEUED:
                    self.on_runnable()
                if settle_experiment:
                    self._settle(t["experiment_id"])
            return new

    # --- experiments ------------------------------------------------------------------------

    def experiment_event(self, exp_id: int, event: ExperimentEvent) -> ExperimentState:
        """A user's command to an experiment: applied to it, then to each of its trials
        (a continue picks its trials: :meth:`continue_experiment`)."""
        if event is XE.CONTINUE:
            raise IllegalTransition("a continue names its trials: "
                                    "Lifecycle.continue_experiment")
        trial_event = {XE.PAUSE: E.PAUSE, XE.ACTIVATE: E.ACTIVATE, XE.KILL: E.KILL}[event]
        with self.lock:
            exp = self.store.experiment(exp_id)
            if exp is None:
                raise NotFound(f"no experiment {exp_id}")
            old = ExperimentState(exp["state"])
            new = next_experiment_state(old, event, exp_id)
            if new is not old:
                self.store.set_experiment_state(exp_id, new.value)
                log.info("experiment %s: %s -> %s (%s)", exp_id, old.value, new.value,
                         event.value)
                self.on_experiment_state({**exp, "state": new.value})
            for t in self.store.trials(exp_id):
                self.trial_event(t["id"], trial_event, settle_experiment=False)
            return self._settle(exp_id)

    def continue_experiment(self, exp_id: int, trial_ids: Iterable[int],
                            **trial_fields: Any) -> ExperimentState:
        """Determined's continue: an ended experiment is ACTIVE again and ``trial_ids`` (its
        ended trials to train further) QUEUED, with ``trial_fields`` written to each (the
        restarts, progress and searcher state of a new run); its other trials stay ended.
        Refused (:class:`IllegalTransition`) unless the experiment and those trials ended.

        >>> # lifecycle.continue_experiment(3, [7], restarts=0, searcher_done=0)
        """
        with self.lock:
            exp = self.store.experiment(exp_id)
            if exp is None:
                raise NotFound(f"no experiment {exp_id}")
            old = ExperimentState(exp["state"])
            new = next_experiment_state(old, XE.CONTINUE, exp_id)
            trial_ids = list(trial_ids)
            trials = [self.store.trial(t) for t in trial_ids]
            for trial_id, t in zip(trial_ids, trials):
                if t is None or t["experiment_id"] != exp_id:
                    raise NotFound(f"no trial {trial_id} in experiment {exp_id}")
                next_trial_state(t["state"], E.CONTINUED, trial_id)  # all or none
            self.store.set_experiment_state(exp_id, new.value)
            log.info("experiment %s: %s -> %s (%s)", exp_id, old.value, new.value,
                     XE.CONTINUE.value)
            if new is not old:
                self.on_experiment_state({**exp, "state": new.value})
            for t in trials:
                assert t is not None  # checked above
                self.trial_event(t["id"], E.CONTINUED, settle_experiment=False, ended=None,
                                 **trial_fields)
            return self._settle(exp_id)

    def settle_unfinished(self) -> None:
        """Bring every experiment not yet ended in line with its trials.

        For a master starting after a crash: the previous one may have died between a
        trial's last transition and its experiment's (a kill whose trial was CANCELED
        while the experiment stayed STOPPING_CANCELED for good).
        """
        with self.lock:
            for exp_id in self.store.experiment_ids_not_in([s.value for s in _EXP_ENDED]):
                self._settle(exp_id)

    def _settle(self, exp_id: int) -> ExperimentState:
        exp = self.store.experiment(exp_id)
        if exp is None:
            raise NotFound(f"no experiment {exp_id}")
        state = ExperimentState(exp["state"])
        trials = self.store.trials(exp_id)
        if state is X.ACTIVE:
            # a trial that stopped for a pause taken back while it stopped runs again (L1)
            paused = [t["id"] for t in trials if t["state"] == T.PAUSED.value]
            for trial_id in paused:
                self.trial_event(trial_id, E.ACTIVATE, settle_experiment=False)
            if paused:
                trials = self.store.trials(exp_id)
        new = settle(state, [t["state"] for t in trials])
        if new is not state:
            self.store.set_experiment_state(exp_id, new.value)
            log.info("experiment %s: %s -> %s (its trials)", exp_id, state.value, new.value)
            self.on_experiment_state({**exp, "state": new.value})
            if new in _EXP_ENDED:
                self.on_experiment_ended({**exp, "state": new.value})
        return new

    # --- jobs -----------------------------------------------------------------------------

    def job_event(self, job_id: int, event: JobEvent, **fields: Any) -> JobState:
        """Apply ``event`` to a job (and write ``fields`` with it); returns the new state.

        As for a trial: a failed exit with restarts left counts a restart; an activate
        while it stops for a pause queues it once it has stopped."""
        with self.lock:
            j = self.store.job(job_id)
            if j is None:
                raise NotFound(f"no job {job_id}")
            old = JobState(j["state"])
            new = next_job_state(old, event, job_id)
            if event is JE.EXITED_FAILED and new in (J.QUEUED, J.PAUSED):
                fields["restarts"] = j["restarts"] + 1
            if old is J.STOPPING_PAUSED and event in (JE.ACTIVATE, JE.PAUSE):
                fields["reactivate"] = int(event is JE.ACTIVATE)
            if new is J.PAUSED and (j["reactivate"] or fields.get("reactivate")):
                new, fields["reactivate"] = J.QUEUED, 0  # activated while it stopped
            if new is not old:
                fields["state"] = new.value
            if fields:
                self.store.update_job(job_id, **fields)
            if new is not old:
                log.info("job %s: %s -> %s (%s)", job_id, old.value, new.value, event.value)
                if new in _JOB_ENDED:  # the row with updated columns is still a JobRow
                    self.on_job_ended(cast(JobRow, {**j, **fields}))
                if new in (J.STOPPING_PAUSED, J.STOPPING_CANCELED):
                    self.on_stop_requested()
                if new is J.QUEUED:
                    self.on_runnable()
            return new
