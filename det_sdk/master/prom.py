"""The master's state as Prometheus metrics (issue 60): what ``/prom/det-state-metrics``
(Determined's path) serves in Prometheus' text format, rendered by the official
``prometheus_client`` (a registry per scrape, built from the store's counts: nothing
is kept between scrapes, and a scrape costs four ``GROUP BY`` queries).

Metrics (gauges): ``det_slots_total``, ``det_slots_used``, ``det_queue_length{kind}``
(trials and jobs waiting for slots), ``det_experiments{state}``, ``det_trials{state}``,
``det_jobs{state}``: every state of det_sdk's lifecycle, zero included, so that a
dashboard's series exist before anything reaches that state.

>>> from prometheus_client.parser import text_string_to_metric_families
>>> text = render(State(2, 1, {"ACTIVE": 1}, {"RUNNING": 1}, {}))
>>> {f.name: f.samples[0].value for f in text_string_to_metric_families(text)}["det_slots_used"]
1.0
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from det_sdk import api

__all__ = ["CONTENT_TYPE", "State", "render", "state_of"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class State:
    """What one scrape reports."""

    slots_total: int
    slots_used: int
    experiments: Mapping[str, int]
    trials: Mapping[str, int]
    jobs: Mapping[str, int]


def state_of(master: Any, hidden: Collection[int] = ()) -> State:
    """The state of ``master`` (a ``det_sdk.master.core.Master``) now, as seen by a caller
    who may not see workspaces ``hidden`` (roles, issue 59): their experiments and trials
    are not counted. Slots and generic jobs are the cluster's (in no workspace), counted
    whole, as `det slot list` and `det job list` show them to every user."""
    total = master.launcher.slots
    return State(slots_total=total, slots_used=total - master.launcher.free_slots(),
                 experiments=master.store.state_counts("experiments", hidden),
                 trials=master.store.state_counts("trials", hidden),
                 jobs=master.store.state_counts("jobs"))


class _Collector:
    def __init__(self, state: State) -> None:
        self.state = state

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        s = self.state
        yield GaugeMetricFamily("det_slots_total", "slots the resource manager offers",
                                value=s.slots_total)
        yield GaugeMetricFamily("det_slots_used", "slots held by running tasks",
                                value=s.slots_used)
        queue = GaugeMetricFamily("det_queue_length", "tasks waiting for slots",
                                  labels=["kind"])
        queue.add_metric(["trial"], s.trials.get(api.TrialState.QUEUED.value, 0))
        queue.add_metric(["job"], s.jobs.get(api.JobState.QUEUED.value, 0))
        yield queue
        for name, help_, counts, states in (
                ("det_experiments", "experiments by state", s.experiments, api.ExperimentState),
                ("det_trials", "trials by state", s.trials, api.TrialState),
                ("det_jobs", "generic jobs by state", s.jobs, api.JobState)):
            family = GaugeMetricFamily(name, help_, labels=["state"])
            for state in [*(st.value for st in states),
                          *sorted(set(counts) - {st.value for st in states})]:
                family.add_metric([state], counts.get(state, 0))
            yield family


def render(state: State) -> str:
    """``state`` in Prometheus' text exposition format."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(state))
    return generate_latest(registry).decode()
