"""Metric series for charts: columns per (trial, group), kept current, and downsampled.

A chart a thousand pixels wide cannot show 100,000 points; sending them costs
megabytes and the browser's time. :func:`minmax_indices` keeps, in each of
``max_points / (2 + 2k)`` equal x buckets, the first and last point and each of
the ``k`` metrics' minimum and maximum: the drawn line has the same envelope (a
spike of one batch survives), which plain striding or averaging would lose. The
full series stays available (``max_points=0``).

Reading and parsing 100,000 JSON rows costs about half a second, so
:class:`SeriesCache` keeps each series' columns and reads only the rows reported
since its last look.

>>> import numpy as np
>>> x = np.arange(1000.0)
>>> y = np.sin(x / 50)
>>> y[500] = 9.0  # a one-batch spike
>>> keep = minmax_indices(x, [y], 40)
>>> bool(len(keep) <= 40 and 500 in keep and keep[0] == 0 and keep[-1] == 999)
True
"""

from __future__ import annotations

import itertools
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Series", "SeriesCache", "minmax_indices"]


def minmax_indices(x: np.ndarray, ys: Sequence[np.ndarray], max_points: int) -> np.ndarray:
    """Indices of the points to draw: per x bucket, first, last, and each series' extremes.

    ``x`` must be sorted. NaN values (a metric missing from a row) are never chosen as
    extremes. Returns all indices when there are no more than ``max_points``.

    >>> import numpy as np
    >>> minmax_indices(np.array([0.0, 1, 2]), [np.array([3.0, 1, 2])], 10).tolist()
    [0, 1, 2]
    >>> y = np.array([0.0, 5, 1, 1, 1, 1, -4, 0])  # one bucket: first, max, min, last
    >>> minmax_indices(np.arange(8.0), [y], 4).tolist()
    [0, 1, 6, 7]
    """
    import numpy as np  # here, not at import: the master starts without it

    n = len(x)
    if max_points <= 0 or n <= max_points:
        return np.arange(n)
    buckets = max(1, max_points // (2 + 2 * len(ys)))
    span = float(x[-1] - x[0]) or 1.0
    b = np.minimum(((x - x[0]) / span * buckets).astype(np.int64), buckets - 1)
    starts = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
    ends = np.r_[starts[1:], n] - 1
    keep = [starts, ends]
    for y in ys:
        nan = np.isnan(y)
        for v in (np.where(nan, np.inf, y), np.where(nan, np.inf, -y)):
            # each bucket's minimum, then the first point of the bucket that has it: O(n)
            lows = np.minimum.reduceat(v, starts)
            hit = np.flatnonzero(v == lows[b])
            keep.append(hit[np.r_[True, b[hit][1:] != b[hit][:-1]]])
    return np.unique(np.concatenate(keep))


class Series:
    """One trial's metric group as columns: steps, epoch, time, and one list per metric.

    >>> s = Series()
    >>> s.append(10, 0, 100.0, {"loss": 0.5}); s.append(20, 1, 101.0, {"loss": 0.4, "acc": 1})
    >>> s.to_json(max_points=0, t0=100.0)["metrics"]
    {'loss': [0.5, 0.4], 'acc': [None, 1.0]}
    """

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.epoch: list[int] = []
        self.time: list[float] = []
        self.values: dict[str, list[float]] = {}
        self._arrays: dict[str, np.ndarray] | None = None  # the lists as arrays, until a change

    def arrays(self) -> dict[str, np.ndarray]:
        """The columns as float arrays (``steps``, ``epoch``, ``time``, ``m:<metric>``)."""
        if self._arrays is None:
            import numpy as np

            self._arrays = {"steps": np.asarray(self.steps, dtype=np.float64),
                            "epoch": np.asarray(self.epoch, dtype=np.float64),
                            "time": np.asarray(self.time, dtype=np.float64),
                            **{f"m:{k}": np.asarray(v, dtype=np.float64)
                               for k, v in self.values.items()}}
        return self._arrays

    def __len__(self) -> int:
        return len(self.steps)

    def append(self, steps: int, epoch: int, t: float, metrics: dict[str, Any]) -> None:
        n = len(self.steps)
        for name in metrics:
            if name not in self.values:
                self.values[name] = [math.nan] * n
        for name, col in self.values.items():
            v = metrics.get(name)
            col.append(float(v) if isinstance(v, (int, float)) else math.nan)
        self._arrays = None
        self.steps.append(steps)
        self.epoch.append(epoch)
        self.time.append(t)

    def extend(self, columns: tuple[str, str, str, str] | None) -> None:
        """Append reports given as the store's columns (``Store.metric_columns``): steps,
        epochs and times comma-separated, metrics a JSON array of objects."""
        if columns is None:
            return
        steps = [int(v) for v in columns[0].split(",")]
        epoch = [int(v) for v in columns[1].split(",")]
        times = [float(v) for v in columns[2].split(",")]
        parsed = json.loads(columns[3])
        if any(b < a for a, b in itertools.pairwise(steps)):  # not in steps order: sort
            order = sorted(range(len(steps)), key=steps.__getitem__)
            steps, epoch = [steps[i] for i in order], [epoch[i] for i in order]
            times, parsed = [times[i] for i in order], [parsed[i] for i in order]
        self._arrays = None
        n = len(self.steps)
        nan = math.nan
        for name in set().union(*parsed) - self.values.keys():
            self.values[name] = [nan] * n
        for name, col in self.values.items():
            # non-finite values arrive as "NaN"/"Infinity" (det_sdk.api.encode_metric): gaps
            col.extend([v if isinstance(v := d.get(name), float) else
                        float(v) if isinstance(v, int) else nan for d in parsed])
        self.steps.extend(steps)
        self.epoch.extend(epoch)
        self.time.extend(times)

    def to_json(self, max_points: int, x_range: tuple[float, float] | None = None,
                t0: float | None = None) -> dict[str, Any]:
        """The columns as JSON-ready lists, downsampled to about ``max_points``.

        ``x_range`` (in steps) narrows to a zoomed-in window first; ``t0`` makes times
        relative (seconds since the trial's first report).
        """
        import numpy as np

        a = self.arrays()
        steps = a["steps"]
        lo, hi = 0, len(steps)
        if x_range is not None:
            lo = int(np.searchsorted(steps, x_range[0], "left"))
            hi = int(np.searchsorted(steps, x_range[1], "right"))
        cols = {k: a[f"m:{k}"][lo:hi] for k in self.values}
        keep = minmax_indices(steps[lo:hi], list(cols.values()), max_points) + lo
        return {
            "steps": steps[keep].astype(np.int64).tolist(),
            "epoch": a["epoch"][keep].astype(np.int64).tolist(),
            "time": np.round(a["time"][keep] - (t0 or 0.0), 3).tolist(),
            "metrics": {k: [None if v != v else v for v in col[keep - lo].tolist()]
                        for k, col in cols.items()},
            "total": len(self.steps),
            "in_range": hi - lo,
            "downsampled": len(keep) < hi - lo,
        }

    def steps_per_epoch(self) -> float | None:
        """Batches per epoch, from rows reported at epoch ends (the smallest steps / epoch:
        a mid-epoch row has more steps per completed epoch)."""
        import numpy as np

        a = self.arrays()
        done = a["epoch"] > 0
        return float(np.min(a["steps"][done] / a["epoch"][done])) if done.any() else None


class SeriesCache:
    """Series of recently viewed trials, brought up to date incrementally from the store.

    Only rows past the last step held are read on each look. A trial that restarted
    from a checkpoint reports some steps again, replacing their rows: the trial's
    ``restarts`` count changed, and the series is read again whole.
    ``store`` is a ``det_sdk.master.store.Store`` (``trial``, ``metric_columns``).

    >>> # SeriesCache(master.store).get(trial_id, "training").to_json(2000)
    """

    def __init__(self, store: Any, capacity: int = 64) -> None:
        self._store = store
        self._capacity = capacity
        self._series: OrderedDict[tuple[int, str], tuple[int, Series]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, trial_id: int, group: str) -> Series:
        """The series, with every row the store has now."""
        key = (trial_id, group)
        trial = self._store.trial(trial_id) or {}
        generation = trial.get("restarts", 0)
        with self._lock:
            gen, s = self._series.get(key, (None, None))
            if s is None or gen != generation:
                s = Series()
                self._series[key] = (generation, s)
            self._series.move_to_end(key)
            while len(self._series) > self._capacity:
                self._series.popitem(last=False)
            s.extend(self._store.metric_columns(trial_id, group,
                                                s.steps[-1] if s.steps else None))
            return s
