"""Paged views of the master's history: experiments, an experiment's trials, jobs,
checkpoints and a trial's metrics, each read ``limit`` rows at a time.

Keyset pagination: a page ends with an opaque cursor naming its last row's key, and the
next page starts after that key. Unlike an offset, a cursor stays right while rows
arrive (newest-first lists never show a row twice nor skip one: new rows land before
the first page, not inside the walk), and a page costs the same few indexed statements
(``Store.*_page``) whether the master holds ten experiments or ten thousand.

>>> c = encode_cursor("experiments", 42)
>>> decode_cursor("experiments", c)
42
>>> try:
...     decode_cursor("jobs", c)
... except InvalidCursor as err:
...     print(err)
this cursor belongs to another list (experiments), not to jobs
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, cast

from det_sdk import api
from det_sdk.config.storage import mask_config_secrets
from det_sdk.errors import DetSdkError
from det_sdk.master.errors import NotFound
from det_sdk.master.job_progress import job_progress
from det_sdk.master.rows import TrialRow
from det_sdk.stages import DEFAULT_STAGE, split_group, stored_group

__all__ = [
    "InvalidCursor",
    "checkpoint_page",
    "decode_cursor",
    "encode_cursor",
    "experiment_detail",
    "experiment_page",
    "job_page",
    "metrics_page",
    "trial_page",
]

GROUPS = ("training", "validation", "evaluation")


class InvalidCursor(DetSdkError, ValueError):
    """A ``cursor`` this master did not make for this list."""


def encode_cursor(kind: str, key: int) -> str:
    """The cursor that continues list ``kind`` after the row whose key is ``key``."""
    raw = json.dumps([kind, key], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(kind: str, cursor: str) -> int:
    """The key a cursor of list ``kind`` continues after; :class:`InvalidCursor` if it is
    not one."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        made_for, key = json.loads(raw)
    except (binascii.Error, ValueError, TypeError):
        raise InvalidCursor("not a cursor this master made: pass a page's next_cursor "
                            "unchanged") from None
    if made_for != kind:
        raise InvalidCursor(f"this cursor belongs to another list ({made_for}), not to {kind}")
    if not isinstance(key, int) or isinstance(key, bool) or not 0 <= key <= api.MAX_INT:
        raise InvalidCursor("not a cursor this master made: pass a page's next_cursor "
                            "unchanged")
    return key


def _next(kind: str, rows: list[Any], limit: int, key: str) -> str | None:
    """The cursor after a page read with ``limit + 1`` rows: None if that was the last."""
    return encode_cursor(kind, rows[limit - 1][key]) if len(rows) > limit else None


# --- experiments and their trials ------------------------------------------------------


def experiment_page(master: Any, limit: int, cursor: str | None,
                    archived: bool | None = None,
                    owners: list[int] | None = None,
                    projects: list[int] | None = None) -> api.ExperimentPage:
    """The newest experiments first: summaries (state, counts, progress, best metric).

    ``master`` is a ``det_sdk.master.core.Master``. One row more than ``limit`` is read
    to know whether there is a next page.

    >>> # page = experiment_page(master, 20, None); experiment_page(master, 20, page.next_cursor)
    """
    before = None if cursor is None else decode_cursor("experiments", cursor)
    rows, total = master.store.experiment_page(before, limit + 1, archived, owners, projects)
    names = master.store.user_names()
    project_of = {p["id"]: p for p in master.store.projects()}
    out = []
    for r in rows[:limit]:
        proj = project_of.get(r["project_id"] or 1) or {}
        smaller = r["smaller_is_better"] is None or bool(r["smaller_is_better"])
        out.append(api.ExperimentSummary(
            id=r["id"], name=r["name"], state=r["state"], created=r["created"],
            ended=r["ended"], searcher=r["searcher"], metric=r["metric"],
            smaller_is_better=smaller, best_metric=r["best_min"] if smaller else r["best_max"],
            progress=r["progress"], num_trials=r["trials"], trial_states=r["trial_states"],
            archived=bool(r["archived"]),
            user_id=master.store.owner_or_first(r["owner_id"]),
            username=names.get(master.store.owner_or_first(r["owner_id"]), ""),
            project_id=r["project_id"] or 1, project_name=proj.get("name", ""),
            workspace_id=proj.get("workspace_id", 1),
            workspace_name=proj.get("workspace_name", "")))
    return api.ExperimentPage(experiments=out, total=total,
                              next_cursor=_next("experiments", rows, limit, "id"))


def _trial_infos(master: Any, trials: list[TrialRow],
                 rungs: dict[int, list[dict[str, Any]]]) -> list[api.TrialInfo]:
    """Trials as the API shows them, without a query per trial: the searcher's length
    comes from the experiment's config (parsed once per experiment by the master)."""
    if not trials:
        return []
    cfg = master.trial_config(trials[0]["id"])
    length = cfg.searcher.max_length if cfg.searcher else None
    out = []
    queued = master.queued_trials()  # waiting in the resource manager's queue (Slurm)
    for t in trials:
        # as Search.operation: the trial's rung target (ASHA), else the searcher's length
        op = None if length is None else api.SearcherLength(
            unit=length.unit,
            length=t["target"] if t["target"] is not None else length.value)
        out.append(api.TrialInfo(
            id=t["id"], experiment_id=t["experiment_id"],
            state=api.TrialState.QUEUED if t["id"] in queued and t["state"] == "RUNNING"
            else api.TrialState(t["state"]),
            queue_reason=queued.get(t["id"]) if t["state"] == "RUNNING" else None,
            hparams=t["hparams"], seed=t["seed"], restarts=t["restarts"],
            steps_completed=t["steps_completed"], epoch=t["epoch"], progress=t["progress"],
            best_metric=t["best_metric"], latest_checkpoint=t["latest_checkpoint"],
            last_error=t["last_error"], bracket=t["bracket"], searcher_length=op,
            checkpoint_note=t.get("checkpoint_note"), keras_backend=t.get("keras_backend"),
            rungs=[api.RungResult(**r) for r in rungs.get(t["id"], [])]))
    return out


def _trials(master: Any, exp_id: int, limit: int, cursor: str | None
            ) -> tuple[list[api.TrialInfo], str | None]:
    kind = f"experiments/{exp_id}/trials"
    after = None if cursor is None else decode_cursor(kind, cursor)
    trials, rungs = master.store.trial_page(exp_id, after, limit + 1)
    return _trial_infos(master, trials[:limit], rungs), _next(kind, trials, limit, "id")


def trial_page(master: Any, exp_id: int, limit: int, cursor: str | None) -> api.TrialPage:
    """An experiment's trials in id order (the searcher's), ``limit`` at a time.

    >>> # trial_page(master, exp_id, 100, None).trials[0].id
    """
    if master.store.experiment(exp_id) is None:
        raise NotFound(f"no experiment {exp_id}")
    trials, next_cursor = _trials(master, exp_id, limit, cursor)
    counts, _ = master.store.trial_state_counts(exp_id)
    return api.TrialPage(trials=trials, total=sum(counts.values()), next_cursor=next_cursor)


def experiment_detail(master: Any, exp_id: int, trials_limit: int) -> api.ExperimentInfo:
    """An experiment with its first ``trials_limit`` trials, its trial counts by state
    and its mean progress over all of them.

    >>> # experiment_detail(master, exp_id, 100).trial_states  # {"COMPLETED": 3}
    """
    exp = master.store.experiment(exp_id)
    if exp is None:
        raise NotFound(f"no experiment {exp_id}")
    trials, next_cursor = _trials(master, exp_id, trials_limit, None)
    counts, progress = master.store.trial_state_counts(exp_id)
    return api.ExperimentInfo(
        id=exp["id"], name=exp["name"], state=exp["state"],
        config=mask_config_secrets(exp["config"]),  # never a secret in describe or the UI
        created=exp["created"], trials=trials, progress=progress,
        num_trials=sum(counts.values()), trial_states=counts, trials_next_cursor=next_cursor,
        archived=bool(exp.get("archived")),
        user_id=master.store.owner_or_first(exp.get("owner_id")),
        username=master.store.user_names().get(
            master.store.owner_or_first(exp.get("owner_id")), ""))


# --- jobs and checkpoints ----------------------------------------------------------------


def job_page(master: Any, limit: int, cursor: str | None) -> api.JobPage:
    """The newest jobs first.

    >>> # job_page(master, 20, None).jobs[0].state
    """
    before = None if cursor is None else decode_cursor("jobs", cursor)
    rows, total = master.store.job_page(before, limit + 1)
    jobs = []
    names = master.store.user_names()
    for r in rows[:limit]:
        done, of = r.pop("rows_done"), r.pop("rows_total")
        r["user_id"] = master.store.owner_or_first(r["user_id"])
        r["username"] = names.get(r["user_id"], "")
        jobs.append(api.JobSummary(**r, progress=job_progress(r["state"], done, of, None,
                                                               None, None)["progress"]))
    return api.JobPage(jobs=jobs, total=total,
                       next_cursor=_next("jobs", rows, limit, "id"))


def checkpoint_page(master: Any, trial_id: int | None, limit: int,
                    cursor: str | None) -> api.CheckpointPage:
    """The newest checkpoints (of one trial) first, with each one's directory.

    >>> # checkpoint_page(master, trial_id, 20, None).checkpoints[0].path
    """
    if trial_id is not None:
        master.trial(trial_id)  # 404 for an unknown trial
    before = None if cursor is None else decode_cursor("checkpoints", cursor)
    rows, total = master.store.checkpoint_page(trial_id, before, limit + 1)
    names = master.store.user_names()
    out = []
    for c in rows[:limit]:
        owner = master.store.owner_or_first(c["owner_id"])
        out.append(api.CheckpointInfo(
            user_id=owner, username=names.get(owner, ""),
            uuid=c["uuid"], trial_id=c["trial_id"], experiment_id=c["experiment_id"],
            steps_completed=c["steps"], epoch=c["epoch"], batch=c["batch"], size=c["size"],
            metrics=c["metrics"], created=c["created"], stage=c["stage"],
            damaged=c.get("damaged"), keras_backend=c.get("keras_backend"),
            # as its storage says (a folder, or a bucket's URL), parsed once per config
            path=f"{master.checkpoint_store.location(c['storage'])}/{c['uuid']}"
            if c["experiment_id"] is not None else None))
    return api.CheckpointPage(checkpoints=out, total=total,
                              next_cursor=_next("checkpoints", rows, limit, "seq"))


# --- metrics -------------------------------------------------------------------------------


def metrics_page(master: Any, trial_id: int, group: str | None, after_steps: int | None,
                 limit: int, stage: str | None = None) -> list[api.MetricsRow]:
    """A trial's reports past ``after_steps`` in (steps, group) order: about ``limit``.

    A page never splits a step: when it is cut, the rows of its last step in the other
    groups come along (at most two more). The next page is ``after_steps`` = the last
    row's steps; a page shorter than ``limit`` is the last. One primary-key range per
    group (no sort of the trial's whole history).

    >>> # rows = metrics_page(master, trial_id, None, None, 1000)
    >>> # more = metrics_page(master, trial_id, None, rows[-1].steps_completed, 1000)

    ``stage``: the series of that stage of the script (det_sdk.stages; None: the default
    stage's, as before stages).
    """
    master.trial(trial_id)  # 404 for an unknown trial
    rows = [r for g in ([group] if group else GROUPS)
            for r in master.store.metrics_after(trial_id, stored_group(g, stage), after_steps,
                                                limit + 1)]
    rows.sort(key=lambda r: (r["steps"], r["grp"]))
    page = rows[:limit]
    if len(rows) > limit:
        page += [r for r in rows[limit:] if r["steps"] == page[-1]["steps"]]
    # cast: a stored group's first part is one of api.MetricGroup (stages.stored_group)
    return [api.MetricsRow(group=cast(api.MetricGroup, split_group(m["grp"])[0]),
                           steps_completed=m["steps"],
                           epoch=m["epoch"], metrics=m["metrics"],
                           stage=None if stage in (None, DEFAULT_STAGE) else stage)
            for m in page]
