"""Stages: each ``fit`` (or named ``evaluate``) of a script is its own part of the run.

A script that trains several models (a teacher, then a student against it, then a
baseline; pre-training then fine-tuning) keeps each one's records apart: its own
checkpoints, metrics (steps counted from 0 within the stage) and "best". Stages are
named by the script (``context.fit(..., stage="teacher")``) or, by default, in call
order: ``fit``, ``fit-2``, ``fit-3`` (``evaluate``, ``evaluate-2`` for evaluations
given ``stage=``), so a deterministic script names them the same on every run.

The first ``fit`` left unnamed is the *default stage*, ``fit``: its records carry no
``stage`` field, exactly as before stages existed (a single-fit run looks as it always
did, and a record without ``stage`` belongs to ``fit``). Every other stage's records
carry ``"stage": name``.

On resume, the run's checkpoint records say which stages the run reached, in order
(:class:`RunStages`). A stage of the script that the run had finished (a later stage
has checkpoints) is not trained again: its model is restored from that stage's last
checkpoint. The last stage the run reached resumes from its latest checkpoint (it
trains nothing more if it had finished). Later stages start afresh. A script whose
stages do not match the run's (other names, another order) is refused with
:class:`StageMismatchError`.

No TensorFlow here: the bookkeeping is the engine's, whatever trains the model.

>>> s = RunStages([{"uuid": "a"}, {"uuid": "b", "stage": "student"}])
>>> s.recorded
['fit', 'student']
>>> teacher = s.begin("fit")
>>> (teacher.name, teacher.resume_uuid, teacher.finished)
('fit', 'a', True)
>>> student = s.begin("fit", "student")
>>> (student.name, student.resume_uuid, student.finished)
('student', 'b', False)
>>> s.begin("fit").name
'fit-3'
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from det_sdk.errors import DetSdkError, UsageError
from det_sdk.storage import best_first

__all__ = [
    "DEFAULT_STAGE",
    "RunStages",
    "Stage",
    "StageError",
    "StageMismatchError",
    "check_stage_name",
    "forget_after",
    "group_by_stage",
    "kept_per_stage",
    "record_fields",
    "split_group",
    "stage_of",
    "stored_group",
]

DEFAULT_STAGE = "fit"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
KINDS = ("fit", "evaluate")


class StageError(DetSdkError, ValueError):
    """A stage name that cannot be used (malformed, or used twice in one run)."""


class StageMismatchError(DetSdkError, ValueError):
    """The script's stages differ from those of the run it resumes."""


def check_stage_name(name: Any) -> str:
    """``name`` if it can name a stage: 1 to 64 letters, digits, ``_ . -``.

    >>> check_stage_name("teacher")
    'teacher'
    >>> check_stage_name("a b")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    det_sdk.stages.StageError: stage: expected 1 to 64 letters, digits, '_', '.' or '-' ...
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise StageError("stage: expected 1 to 64 letters, digits, '_', '.' or '-' "
                         f"(starting with a letter or digit), got {name!r}")
    return name


def stage_of(record: Mapping[str, Any]) -> str:
    """The stage a metrics or checkpoint record belongs to (none given: the default).

    >>> stage_of({"uuid": "a"}), stage_of({"stage": "student"})
    ('fit', 'student')
    """
    return str(record.get("stage") or DEFAULT_STAGE)


def record_fields(stage: str) -> dict[str, str]:
    """What a record of ``stage`` carries: nothing for the default stage.

    >>> record_fields("fit"), record_fields("teacher")
    ({}, {'stage': 'teacher'})
    """
    return {} if stage == DEFAULT_STAGE else {"stage": stage}


def stored_group(group: str, stage: str | None) -> str:
    """How the master keys a stage's metric group: the default stage's as before, the
    others' as ``stage/group`` (one series per stage and group, never shared).

    >>> stored_group("validation", None), stored_group("validation", "student")
    ('validation', 'student/validation')
    """
    return group if stage in (None, DEFAULT_STAGE) else f"{stage}/{group}"


def split_group(stored: str) -> tuple[str, str]:
    """``(group, stage)`` of a stored group (:func:`stored_group`'s inverse).

    >>> split_group("training"), split_group("student/validation")
    (('training', 'fit'), ('validation', 'student'))
    """
    stage, _, group = stored.rpartition("/")
    return group, stage or DEFAULT_STAGE


def group_by_stage(records: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Records by stage, stages in the order they first appear, each stage's in order.

    >>> list(group_by_stage([{"u": 1}, {"u": 2, "stage": "s"}, {"u": 3}]).items())
    [('fit', [{'u': 1}, {'u': 3}]), ('s', [{'u': 2, 'stage': 's'}])]
    """
    out: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        out.setdefault(stage_of(r), []).append(r)
    return out



def kept_per_stage(records: Iterable[Mapping[str, Any]], latest: int, best: int, metric: str,
                   smaller_is_better: bool) -> set[str]:
    """The uuids retention keeps: in each stage, its ``latest`` newest (at least one: a
    finished stage is restored from its final checkpoint) and its ``best`` best by
    ``metric`` (:func:`det_sdk.storage.best_first`). Records oldest first.

    >>> rows = [{"uuid": "a", "metrics": {"l": 0.1}}, {"uuid": "b", "metrics": {"l": 0.5}},
    ...         {"uuid": "c", "stage": "s", "metrics": {}}]
    >>> sorted(kept_per_stage(rows, 1, 1, "l", True))
    ['a', 'b', 'c']
    """
    keep: set[str] = set()
    for rows in group_by_stage(records).values():
        keep |= {r["uuid"] for r in rows[-max(1, latest):]}
        keep |= {r["uuid"] for r in best_first(list(rows), metric, smaller_is_better)[:best]}
    return keep

@dataclass(frozen=True)
class Stage:
    """One stage as the script reaches it.

    ``resume_uuid``: the checkpoint it continues from (None: it starts afresh).
    ``finished``: the run had completed it (a later stage has checkpoints): restore
    its model from ``resume_uuid``, do not train. ``searched``: on the cluster, the
    stage the searcher's length applies to.
    """

    name: str
    kind: str
    index: int
    resume_uuid: str | None = None
    finished: bool = False
    searched: bool = False


class RunStages:
    """The stages of a run: those its checkpoint records hold, and the script's as it goes.

    ``checkpoints``: the run's checkpoint records oldest first (each with ``uuid`` and,
    but for the default stage, ``stage``), those whose files exist. ``searched``: the
    name of the stage the searcher's length applies to (None: the first ``fit``).
    """

    def __init__(self, checkpoints: Iterable[Mapping[str, Any]],
                 searched: str | None = None) -> None:
        by_stage = group_by_stage(checkpoints)
        self.recorded: list[str] = list(by_stage)
        self.latest: dict[str, str] = {s: str(rows[-1]["uuid"]) for s, rows in by_stage.items()}
        self.searched = check_stage_name(searched) if searched is not None else None
        self.names: list[str] = []  # the script's stages so far, in call order
        self._calls = {kind: 0 for kind in KINDS}
        self._matched = 0  # how many of the run's recorded stages the script has reached
        self._searched_taken = False

    def begin(self, kind: str, name: str | None = None) -> Stage:
        """The script calls its next ``kind`` (``fit`` or ``evaluate``), named or not."""
        if kind not in KINDS:
            raise UsageError(f"stage kind must be one of {KINDS}, got {kind!r}")
        self._calls[kind] += 1
        n = self._calls[kind]
        if name is None:
            name = kind if n == 1 else f"{kind}-{n}"
        else:
            check_stage_name(name)
        if name in self.names:
            raise StageError(
                f"stage {name!r} is already a stage of this run (stages so far: "
                f"{', '.join(self.names)}); give each fit its own stage= name")
        self.names.append(name)
        searched = False
        if kind == "fit" and not self._searched_taken:
            searched = name == self.searched if self.searched is not None else True
            self._searched_taken = searched
        if kind != "fit":
            return Stage(name, kind, len(self.names) - 1, searched=False)
        return self._match(name, len(self.names) - 1, searched)

    def _match(self, name: str, index: int, searched: bool) -> Stage:
        """Where the run's records say stage ``name`` is; refuse a different order."""
        if name in self.recorded:
            i = self.recorded.index(name)
            if i != self._matched:
                expected = self.recorded[self._matched] if self._matched < len(self.recorded) \
                    else None
                raise StageMismatchError(self._mismatch(name, expected))
            self._matched += 1
            return Stage(name, "fit", index, self.latest[name],
                         finished=i < len(self.recorded) - 1, searched=searched)
        if self._matched < len(self.recorded):
            raise StageMismatchError(self._mismatch(name, self.recorded[self._matched]))
        return Stage(name, "fit", index, searched=searched)

    def _mismatch(self, name: str, expected: str | None) -> str:
        run = ", ".join(self.recorded)
        want = f"its next stage with checkpoints is {expected!r}" if expected else \
            "it has no further stage"
        return (f"stage {name!r}: the script's stages do not match the run it resumes (the "
                f"run's stages with checkpoints: {run}; {want}, the script's fit number "
                f"{self._calls['fit']} is {name!r}). Resume with the script that made the run, "
                "or name its stages (context.fit(..., stage='name')) as the run did")


def forget_after(records: list[dict[str, Any]], checkpoints: Sequence[Mapping[str, Any]]
                 ) -> list[dict[str, Any]]:
    """The metrics records a resumed run keeps: those its checkpoints cover.

    The stages before the last checkpointed one are kept whole; that stage's records up
    to its latest checkpoint's step; later stages' records go (they train again).

    >>> ms = [{"steps_completed": 4}, {"steps_completed": 2, "stage": "s"},
    ...       {"steps_completed": 6, "stage": "s"}, {"steps_completed": 1, "stage": "t"}]
    >>> forget_after(ms, [{"uuid": "a", "steps_completed": 4},
    ...                   {"uuid": "b", "steps_completed": 2, "stage": "s"}])
    [{'steps_completed': 4}, {'steps_completed': 2, 'stage': 's'}]
    >>> forget_after(ms, [])  # none: only what step 0 reported (as before stages)
    []
    """
    if not checkpoints:
        return [r for r in records if int(r["steps_completed"]) <= 0]
    last = checkpoints[-1]
    current, done = stage_of(last), int(last.get("steps_completed", 0))
    order = list(group_by_stage(checkpoints))
    before = set(order[:order.index(current)])
    return [r for r in records if stage_of(r) in before
            or (stage_of(r) == current and int(r["steps_completed"]) <= done)]
