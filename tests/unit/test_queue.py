"""The queue's pure parts (issue 59): the order, the choice of trials to preempt, the
fair-share offers, and the config fields' bounds."""

from __future__ import annotations

import itertools

import pytest

from det_sdk.config import ConfigError, JobConfig, parse_experiment_config
from det_sdk.master.queue import Group, Holder, Waiting, fair_offers, order_key, pick_victims


def test_the_order_is_priority_then_submission_then_id() -> None:
    ws = [Waiting("trial", 3, 42, 1.0, 1), Waiting("job", 1, 42, 2.0, 1),
          Waiting("trial", 2, 10, 9.0, 1), Waiting("trial", 1, 42, 1.0, 1)]
    assert [(w.kind, w.id) for w in sorted(ws, key=order_key)] == [
        ("trial", 2), ("trial", 1), ("trial", 3), ("job", 1)]


def test_victims_lowest_priority_then_newest_and_only_as_many_as_needed() -> None:
    holders = [Holder("old-60", 1, 60, 1.0), Holder("new-60", 1, 60, 2.0),
               Holder("new-50", 1, 50, 3.0), Holder("equal", 1, 10, 4.0)]
    assert [h.alloc_id for h in pick_victims(1, 10, holders)] == ["new-60"]
    assert [h.alloc_id for h in pick_victims(3, 10, holders)] == ["new-60", "old-60", "new-50"]
    assert pick_victims(4, 10, holders) == []  # the equal one is never taken: not enough
    assert pick_victims(1, 60, holders) == []  # nothing lower than 60


@pytest.mark.parametrize("capacity", [0, 1, 2, 3, 7, 16])
def test_fair_offers_never_exceed_capacity_or_demand(capacity: int) -> None:
    for demands in itertools.product([0, 1, 2, 5], repeat=3):
        for weights in ([1.0, 1.0, 1.0], [3.0, 1.0, 0.5]):
            groups = {i: Group(d, w) for i, (d, w) in enumerate(zip(demands, weights))}
            offers = fair_offers(groups, capacity)
            assert sum(offers.values()) <= max(capacity, 0)
            assert all(0 <= offers[i] <= groups[i].demand for i in groups)
            # nothing left idle while someone still wants it
            if sum(offers.values()) < capacity:
                assert all(offers[i] == groups[i].demand for i in groups)


def test_fixed_slots_are_offered_first() -> None:
    # a user whose batch job holds 3 of 4 slots keeps them; the other gets the last one
    offers = fair_offers({"a": Group(3, 1.0, fixed=3), "b": Group(4, 1.0)}, 4)
    assert offers == {"a": 3, "b": 1}


@pytest.mark.parametrize("resources, field", [
    ({"priority": 0}, "resources.priority"), ({"priority": 100}, "resources.priority"),
    ({"priority": True}, "resources.priority"), ({"priority": "5"}, "resources.priority"),
    ({"weight": 0}, "resources.weight"), ({"weight": float("nan")}, "resources.weight"),
    ({"max_slots": 0}, "resources.max_slots"),
    ({"max_slots": 1, "slots_per_trial": 2}, "max_slots"),
])
def test_queue_fields_out_of_range_are_refused_naming_the_field(resources: dict,
                                                                field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        parse_experiment_config({"entrypoint": "python3 t.py", "resources": resources})


def test_defaults_are_determineds() -> None:
    cfg = parse_experiment_config({"entrypoint": "python3 t.py"})
    assert (cfg.resources.priority, cfg.resources.weight, cfg.resources.max_slots) == \
        (42, 1.0, None)
    assert JobConfig.model_validate({"entrypoint": "x"}).resources.priority == 42
