"""The validation data of ``context.fit``, whatever kind the training data is.

The proposal's ``x_val``/``y_val`` folded into ``validation_data``, the
``validation_split`` fraction checked, the validation data as this process takes it,
and, frozen, what a validation at a searcher's target and the step outputs' average
read of it (:class:`Validation`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from det_sdk.distributed import Processes
from det_sdk.errors import UsageError
from det_sdk.keras import _data
from det_sdk.keras._inputs import batch_rows

__all__ = ["Validation", "fold_validation_data", "local_validation", "split_fraction"]


def fold_validation_data(data: dict[str, Any]) -> None:
    """Fold the proposal's ``x_val``/``y_val`` into ``validation_data``.

    Validation data is optional, as in ``model.fit``: a fit without it trains and
    records training metrics; what needs a validation metric (a searcher's
    operations, the best checkpoint) says so where it needs it.

    >>> kw = {"x_val": 1, "y_val": 2}; fold_validation_data(kw); kw
    {'validation_data': (1, 2)}
    """
    x_val, y_val = data.pop("x_val", None), data.pop("y_val", None)
    if x_val is not None or y_val is not None:
        if data.get("validation_data") is not None:
            raise UsageError("context.fit: give validation data once: either validation_data or "
                             "x_val/y_val, not both")
        if x_val is None:
            raise UsageError("context.fit: y_val was given without x_val")
        data["validation_data"] = x_val if y_val is None else (x_val, y_val)


def split_fraction(data: dict[str, Any]) -> Any:
    """``validation_split`` taken out of ``data`` (0.0: none), checked to be a fraction."""
    frac = data.pop("validation_split", 0.0) or 0.0
    if frac and not 0 < frac < 1:
        raise UsageError(f"context.fit: validation_split must be in (0, 1), got {frac}")
    return frac


def local_validation(dist: Processes, data: dict[str, Any]) -> None:
    """Validation data as this process's part: full numpy arrays and Sequences are shared
    out (each sample validated once over all processes, whose metric states are then
    summed); wrapped views, per-process arrays and datasets are each process's own."""
    val = data.get("validation_data")
    if dist.size == 1 or val is None:
        return
    parts = val if isinstance(val, tuple) else (val,)
    x, y, sw = (*parts, None, None)[:3]
    x, y, sw, _, _ = _data.local_part(dist, x, y, sw)
    data["validation_data"] = tuple(p for p in (x, y, sw) if p is not None) \
        if isinstance(val, tuple) else x


@dataclass(frozen=True, eq=False)
class Validation:
    """This process's validation data as ``model.fit`` takes it (``(x, y[, sample_weight])``
    or ``x`` alone), and the batch size it is validated by.

    >>> import numpy as np
    >>> v = Validation((np.zeros((5, 1)), np.zeros((5, 1))), 2)
    >>> v.rows()(2), v.parts[2] is None
    (1, True)
    """

    data: Any
    batch_size: int | None

    @property
    def parts(self) -> tuple[Any, Any, Any]:
        """``(x, y, sample_weight)``, None for the missing ones."""
        parts = self.data if isinstance(self.data, tuple) else (self.data,)
        x, y, sw = (*parts, None, None)[:3]
        return x, y, sw

    def rows(self) -> Callable[[int], float] | None:
        """Rows of each validation batch (``_inputs.batch_rows``), None when unknown."""
        data = self.data
        x = data[0] if isinstance(data, tuple) and data else data
        return batch_rows(x, self.batch_size)
