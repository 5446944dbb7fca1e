"""A model's metrics: their state variables, their results, ``evaluate``'s order."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from det_sdk.keras._compat._impl import impl

__all__ = ["metric_results", "metric_variables", "metrics_in_order"]


def metric_variables(model: Any) -> list[Any]:
    """The state variables of ``model``'s metrics (loss tracker and compiled metrics).

    Totals and counts, confusion-matrix cells, AUC's per-threshold counts: the
    state of every built-in metric adds up over disjoint parts of the data, so
    their sums over processes are the state of one process that saw all of it.
    """
    found: list[Any] = []
    seen: set[int] = set()
    for metric in model.metrics:
        for var in metric.variables:
            if id(var) not in seen:
                seen.add(id(var))
                found.append(var)
    return found


def metric_results(model: Any) -> dict[str, float]:
    """``model``'s metric results from their current state, by the names Keras logs."""
    out: dict[str, float] = {}
    for name, value in model.get_metrics_result().items():
        try:
            out[name] = float(value)
        except (TypeError, ValueError):
            continue  # a non-scalar result (F1 per class): not logged by det_sdk either
    return out


def metrics_in_order(model: Any, logs: Mapping[str, Any]) -> list[Any]:
    """``evaluate``'s list result from its dict result, in Keras's own order."""
    result: list[Any] = impl.metrics_in_order(model, logs)
    return result
