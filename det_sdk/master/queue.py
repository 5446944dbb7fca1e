"""The queue's order and preemption: Determined's priority scheduler, on det_sdk's slots.

What waits for slots (queued trials of ACTIVE experiments and queued batch jobs) runs in
the order of :func:`order_key`: ``resources.priority`` first (1-99, lower first,
Determined's default 42), then submission time. The head of the queue that does not fit
keeps everything behind it waiting (no backfill: a big trial is never starved by small
ones, and a preempted trial never restarts while its preemptor waits for its slots).

When the head cannot start, :func:`pick_victims` chooses running trials of a strictly
lower priority (a larger number) to preempt: the lowest priority first and, among equals,
the newest first, and only as many as free the slots needed, and none at all when even
all of them would not. Trials are preemptible, as Determined's experiments are by default;
batch jobs, commands, notebooks and shells are not. A preempted trial is asked to stop
through the allocation's preemption signal (the pause path: it checkpoints and exits),
and its exit queues it again (``TrialEvent.PREEMPTED``), not user-PAUSED.

>>> order_key(Waiting("trial", 7, priority=10, submitted=5.0, slots=1))
(10, 5.0, 7)
>>> [v.alloc_id for v in pick_victims(2, 10, [Holder("a", 1, 42, 1.0), Holder("b", 1, 50, 2.0)])]
['b', 'a']
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DEFAULT_PRIORITY", "POLICIES", "Group", "Holder", "Waiting", "fair_offers",
           "order_key", "pick_victims",
           "priority_of"]

#: Determined's default priority (lower runs first)
DEFAULT_PRIORITY = 42


def priority_of(config: Mapping[str, Any]) -> int:
    """A stored config's ``resources.priority`` (validated at create; 42 if absent).

    >>> priority_of({"resources": {"priority": 7}}), priority_of({})
    (7, 42)
    """
    value = (config.get("resources") or {}).get("priority", DEFAULT_PRIORITY)
    return int(value) if isinstance(value, int) else DEFAULT_PRIORITY


@dataclass
class Waiting:
    """A task waiting for slots: ``kind`` "trial" or "job", with what the scheduler needs
    to launch it in ``extra`` (its rows and parsed config)."""

    kind: str
    id: int
    priority: int
    submitted: float
    slots: int
    extra: dict[str, Any] = field(default_factory=dict)


def order_key(w: Waiting) -> tuple[int, float, int]:
    """The queue's order: priority, then submission time, then id (a trial's experiment
    was submitted once for all its trials: they go in the order the searcher made them)."""
    return (w.priority, w.submitted, w.id)


@dataclass(frozen=True)
class Holder:
    """A preemptible running allocation: its id, slots, priority, start time and owner
    (a user id; None: the first admin)."""

    alloc_id: str
    slots: int
    priority: int
    started: float
    owner: Any = None


def pick_victims(need: int, priority: int, holders: Iterable[Holder]) -> list[Holder]:
    """The allocations to preempt so that ``need`` more slots free for a task of
    ``priority``: strictly lower priorities only (a larger number), the lowest first and
    the newest first among equals; none when even all of them would not free enough
    (preempting them would stop work for nothing).

    >>> pick_victims(1, 42, [Holder("a", 1, 42, 1.0)])  # equal priority: never
    []
    >>> pick_victims(3, 10, [Holder("a", 1, 50, 1.0)])  # not enough: none
    []
    """
    lower = sorted((h for h in holders if h.priority > priority),
                   key=lambda h: (-h.priority, -h.started))
    chosen: list[Holder] = []
    freed = 0
    for h in lower:
        if freed >= need:
            break
        chosen.append(h)
        freed += h.slots
    return chosen if freed >= need else []


#: the master's scheduling policies (``det master up --scheduler``): Determined's two
POLICIES = ("priority", "fair_share")


@dataclass
class Group:
    """A user's share in the fair-share policy: the slots their tasks hold and want
    (``demand``: held plus waiting), their weight (the sum of ``resources.weight`` of their
    experiments and jobs that hold or want slots) and the slots they cannot give back
    (``fixed``: batch jobs and commands are not preemptible)."""

    demand: int
    weight: float
    fixed: int = 0
    registered: float = 0.0


def fair_offers(groups: Mapping[Any, Group], capacity: int) -> dict[Any, int]:
    """Slots offered to each group by weighted max-min fairness (progressive filling, as
    Determined's fair-share scheduler divides slots): fixed slots first, then every group
    below its demand gets ``max(1, capacity * weight / total weight)`` more in turns (the
    smallest demand first, then the oldest) until slots or demands run out.

    >>> fair_offers({"a": Group(4, 1.0), "b": Group(4, 1.0)}, 4)
    {'a': 2, 'b': 2}
    >>> fair_offers({"a": Group(4, 3.0), "b": Group(4, 1.0)}, 4)
    {'a': 3, 'b': 1}
    >>> fair_offers({"a": Group(1, 1.0), "b": Group(4, 1.0)}, 4)  # a wants less: b gets it
    {'a': 1, 'b': 3}
    """
    offers = {k: min(g.fixed, g.demand) for k, g in groups.items()}
    left = capacity - sum(offers.values())
    order = sorted(groups, key=lambda k: (groups[k].demand, groups[k].registered))
    while left > 0:
        hungry = [k for k in order if offers[k] < groups[k].demand]
        if not hungry:
            break
        total = sum(groups[k].weight for k in hungry) or 1.0
        start = left
        for k in hungry:
            if left <= 0:
                break
            share = max(1, int(start * groups[k].weight / total))
            give = min(share, left, groups[k].demand - offers[k])
            offers[k] += give
            left -= give
    return offers
