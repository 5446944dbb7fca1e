"""Numbers on the wire: the one encoding of NaN and infinities, and how metrics rank.

JSON has no NaN or infinity, yet a diverging model reports them: they travel as the
strings "NaN", "Infinity" and "-Infinity" (JavaScript's spelling, as Determined's REST
API and protobuf's JSON mapping write them) and are floats again on either side
(:data:`det_sdk.api.Metric` reads them back). Everything a training process sends the
master goes through :func:`dumps`; the local session's ``metrics.jsonl`` too.

No pydantic, no TensorFlow here: the client and the ``det`` CLI import it.

>>> dumps({"metrics": {"loss": float("nan")}})
'{"metrics":{"loss":"NaN"}}'
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Callable
from typing import Any

from det_sdk.errors import MetricsLimitError, UsageError

__all__ = ["MAX_METRICS_PER_REPORT", "MAX_METRIC_NAME_CHARS", "check_metrics",
           "decode_metric", "decode_metrics", "dumps", "encode_metric", "is_rankable",
           "metric_rank", "replace_non_finite", "to_wire"]

# What one metrics report may hold (det_sdk.api.MetricsReport refuses more; a report
# within both limits also stays well under the master's 1 MiB body limit).
MAX_METRICS_PER_REPORT = 1000
MAX_METRIC_NAME_CHARS = 256


def check_metrics(group: str, metrics: Any) -> None:
    """Raise :class:`~det_sdk.errors.MetricsLimitError` unless ``metrics`` (one report of
    ``group``) is within what the master stores: at most :data:`MAX_METRICS_PER_REPORT`
    names, each 1 to :data:`MAX_METRIC_NAME_CHARS` characters. Checked in the training
    process before the report is queued, so the script stops where it reported.

    >>> check_metrics("training", {"loss": 0.5})
    >>> try:
    ...     check_metrics("training", {str(i): 0.0 for i in range(1001)})
    ... except MetricsLimitError as err:
    ...     print(str(err)[:69])
    a training metrics report has 1001 metrics; the master stores at most
    """
    if len(metrics) > MAX_METRICS_PER_REPORT:
        raise MetricsLimitError(
            f"a {group} metrics report has {len(metrics)} metrics; the master stores at most "
            f"{MAX_METRICS_PER_REPORT} per report (det_sdk.wire.MAX_METRICS_PER_REPORT): "
            "report fewer (aggregate per-class values, or log the rest to TensorBoard)")
    for key in metrics:
        name = str(key)
        if not 1 <= len(name) <= MAX_METRIC_NAME_CHARS:
            shown = name if len(name) <= 60 else f"{name[:60]}..."
            raise MetricsLimitError(
                f"{group} metric {shown!r}: a metric name is 1 to {MAX_METRIC_NAME_CHARS} "
                f"characters (det_sdk.wire.MAX_METRIC_NAME_CHARS), this one has {len(name)}")

_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def encode_metric(v: float) -> float | str:
    """A float as JSON can carry it.

    >>> encode_metric(0.5), encode_metric(float("nan")), encode_metric(float("-inf"))
    (0.5, 'NaN', '-Infinity')
    """
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return v


def decode_metric(v: Any) -> Any:
    """The inverse of :func:`encode_metric`; refuses booleans.

    >>> decode_metric("Infinity"), decode_metric(2)
    (inf, 2)
    """
    if isinstance(v, bool):
        raise UsageError("expected a number, not a boolean")
    if isinstance(v, str):
        if v in _NON_FINITE:
            return _NON_FINITE[v]
        raise UsageError('expected a number or one of "NaN", "Infinity", "-Infinity"')
    return v


def replace_non_finite(obj: Any, replace: Callable[[float], Any]) -> Any:
    """``obj`` with every non-finite float (Python's, NumPy's) replaced by
    ``replace(value)``, through dicts, lists and tuples (tuples become lists); other
    values unchanged.

    >>> replace_non_finite({"m": (1, float("nan"))}, lambda v: None)
    {'m': [1, None]}
    """
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else replace(obj)
    if obj is None or type(obj) in (int, str, bool):  # most values: no ABC checks below
        return obj
    if isinstance(obj, dict):
        return {k: replace_non_finite(v, replace) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [replace_non_finite(v, replace) for v in obj]
    if isinstance(obj, numbers.Real) and not isinstance(obj, numbers.Integral):
        return replace_non_finite(float(obj), replace)  # a NumPy float32 scalar, a Fraction
    return obj


def to_wire(obj: Any) -> Any:
    """``obj`` with every non-finite float (Python's, NumPy's) replaced by its wire string
    (:func:`encode_metric`), through dicts, lists and tuples; other values unchanged.

    The one encoding of everything a training process sends the master (metrics, the
    searcher metric, checkpoint metadata, progress) and of what the local session
    writes to ``metrics.jsonl``: standard JSON, which every reader (SQLite's JSON
    functions, browsers, ``jq``) takes.

    >>> to_wire({"loss": float("nan"), "m": [1, float("-inf")], "ok": True})
    {'loss': 'NaN', 'm': [1, '-Infinity'], 'ok': True}
    """
    return replace_non_finite(obj, encode_metric)


def dumps(obj: Any) -> str:
    """``obj`` as standard JSON text, NaN and infinities as strings (:func:`to_wire`).

    Raises ``TypeError`` for values JSON cannot hold at all, as ``json.dumps`` does.

    >>> dumps({"searcher_metric": float("inf"), "length": 3})
    '{"searcher_metric":"Infinity","length":3}'
    """
    return json.dumps(to_wire(obj), separators=(",", ":"), allow_nan=False)


def metric_rank(value: Any, smaller_is_better: bool) -> tuple[int, float]:
    """The sort key of a searcher metric: the smallest key ranks best.

    The rule, the same everywhere a metric is ranked (ASHA promotions, a trial's best
    checkpoint, retention's "best", the trial's and experiment's ``best_metric``, the
    UI's best trials): finite values rank by ``smaller_is_better``; a non-finite value
    (NaN, +Infinity or -Infinity: a diverged model) is the WORST value in both
    directions, after every finite one. So NaN and +inf rank last when smaller is
    better, NaN and -inf when larger is better, and a -inf loss (or a +inf accuracy)
    never wins either. Non-finite values tie with each other (a stable sort keeps
    their order), and a missing value (None, a string) ranks as non-finite.

    >>> sorted([float("nan"), 0.3, float("-inf"), 0.1], key=lambda v: metric_rank(v, True))
    [0.1, 0.3, nan, -inf]
    >>> sorted([float("inf"), 0.3, 0.9], key=lambda v: metric_rank(v, False))
    [0.9, 0.3, inf]
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value):
        return (1, 0.0)
    return (0, float(value) if smaller_is_better else -float(value))


def is_rankable(value: Any) -> bool:
    """Whether a metric value can be a best one (a finite number; see :func:`metric_rank`)."""
    return metric_rank(value, True)[0] == 0


def decode_metrics(metrics: Any) -> dict[str, Any]:
    """A metrics dict read back from JSON: the wire strings are floats again (a value
    that is neither a number nor one of them is kept as it is).

    >>> decode_metrics({"loss": "NaN", "acc": 0.5, "note": "x"})
    {'loss': nan, 'acc': 0.5, 'note': 'x'}
    """
    if not isinstance(metrics, dict):
        return {}
    return {k: _NON_FINITE.get(v, v) if isinstance(v, str) else v for k, v in metrics.items()}
