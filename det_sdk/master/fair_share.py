"""The fair-share policy (``det master up --scheduler fair_share``): slots divided between
users as Determined's fair-share scheduler divides them between groups.

Each user is a group (det_sdk.master.queue.Group): their demand is the slots their trials
and batch jobs hold plus those their queued ones want; their weight the sum of
``resources.weight`` of those experiments (a batch job weighs 1); slots held by batch jobs
and commands are fixed (not preemptible). :func:`det_sdk.master.queue.fair_offers` gives
each user an offer by weighted max-min fairness; a queued task starts while its user holds
less than their offer, the user furthest below first (then submission order), and a user
below their offer whose task does not fit preempts the newest trials of users above
theirs, never more than those users hold above their offers. ``resources.priority`` does
not order this policy (as in Determined, where priority belongs to the priority scheduler).

>>> # FairSharePlan(scheduler, waiting): built by Scheduler.schedule for one pass
"""

from __future__ import annotations

from typing import Any

from det_sdk.master.queue import Group, Holder, Waiting, fair_offers

__all__ = ["FairSharePlan"]

_COMMANDS = "commands"  # the group of commands and shells: their slots are fixed


class FairSharePlan:
    """One scheduling pass of the fair-share policy over ``scheduler``'s store."""

    def __init__(self, scheduler: Any, waiting: list[Waiting]) -> None:
        self.scheduler = scheduler
        store = scheduler.store
        self.held: dict[Any, int] = {}
        demand: dict[Any, int] = {}
        fixed: dict[Any, int] = {}
        weights: dict[Any, dict[tuple[str, int], float]] = {}
        registered: dict[Any, float] = {}

        def add(owner: Any, key: tuple[str, int] | None, weight: float, slots: int,
                created: float) -> None:
            demand[owner] = demand.get(owner, 0) + slots
            if key is not None:
                weights.setdefault(owner, {})[key] = weight
            registered[owner] = min(registered.get(owner, created), created)

        for a in store.running_allocations():
            slots = int(a["slots"])
            if a["trial_id"] is not None:
                t = store.trial(a["trial_id"])
                exp = store.experiment(t["experiment_id"]) if t is not None else None
                if exp is None:
                    continue
                owner = exp["owner_id"]
                add(owner, ("exp", exp["id"]),
                    scheduler.config_of(a["trial_id"]).resources.weight, slots,
                    exp["created"])
            elif a["job_id"] is not None:
                job = store.job(a["job_id"])
                owner = job["owner_id"] if job is not None else None
                add(owner, ("job", a["job_id"]), 1.0, slots, a["started"])
                fixed[owner] = fixed.get(owner, 0) + slots
            else:
                owner = _COMMANDS
                add(owner, None, 0.0, slots, a["started"])
                fixed[owner] = fixed.get(owner, 0) + slots
            self.held[owner] = self.held.get(owner, 0) + slots
        for w in waiting:
            row = w.extra["exp"] if w.kind == "trial" else w.extra["row"]
            weight = w.extra["cfg"].resources.weight if w.kind == "trial" else 1.0
            add(row["owner_id"], ("exp" if w.kind == "trial" else "job", row["id"]), weight,
                w.slots, w.submitted)
        groups = {o: Group(demand[o], sum(weights.get(o, {}).values()), fixed.get(o, 0),
                           registered[o]) for o in demand}
        self.offers = fair_offers(groups, scheduler.launcher.slots)

    def owner(self, w: Waiting) -> Any:
        return (w.extra["exp"] if w.kind == "trial" else w.extra["row"])["owner_id"]

    def key(self, w: Waiting) -> Any:
        o = self.owner(w)
        return (self.held.get(o, 0) / max(self.offers.get(o, 0), 1), w.submitted, w.id)

    def may_take(self, w: Waiting) -> bool:
        o = self.owner(w)
        return self.held.get(o, 0) + w.slots <= self.offers.get(o, 0)

    def took(self, w: Waiting) -> None:
        o = self.owner(w)
        self.held[o] = self.held.get(o, 0) + w.slots

    def blocked(self, w: Waiting) -> None:
        """``w``'s user is below their offer: preempt the newest trials of users above
        theirs, enough to free its slots (none if even all of them would not)."""
        freeing, holders = self.scheduler.running_holders()
        need = w.slots - self.scheduler.launcher.free_slots() - freeing
        if need <= 0:
            return  # enough is on its way: preempting more would thrash
        me = self.owner(w)
        over = {o: self.held.get(o, 0) - self.offers.get(o, 0) for o in self.held}
        victims: list[Holder] = []
        freed = 0
        for h in sorted(holders, key=lambda h: -h.started):
            if freed >= need:
                break
            if h.owner != me and over.get(h.owner, 0) >= h.slots:
                victims.append(h)
                over[h.owner] -= h.slots
                freed += h.slots
        if freed >= need:
            self.scheduler.preempt(victims, w)
