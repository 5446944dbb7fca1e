"""Which ``model.fit`` calls take training from where it is to a target, validating on time.

Keras validates only at the end of an epoch, and its ``steps_per_epoch`` is the
same for every epoch of one call. So a validation in the middle of an epoch (a
``min_validation_period`` in batches, or a searcher length that ends mid-epoch)
ends one call there, and a call that starts mid-epoch covers the rest of that
epoch only. Positions are counted as ``epoch * steps_per_epoch + batch``.

>>> calls = plan_calls(0, 0, target=Length(batches=25), steps_per_epoch=10,
...                    validation_period=None)
>>> [(c.initial_epoch, c.epochs, c.start_batch, c.stop_at, c.validate_epochs) for c in calls]
[(0, 3, 0, (2, 5), [1, 2, 3])]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from det_sdk.config import Length
from det_sdk.errors import UsageError

__all__ = ["FitCall", "plan_calls"]


@dataclass(frozen=True)
class FitCall:
    """One ``model.fit``: epochs ``[initial_epoch, epochs)``, the first from ``start_batch``.

    ``stop_at`` is ``(epoch, batch)`` where the call ends early (mid-epoch), or
    None. ``validate_epochs`` is Keras's ``validation_freq`` list (1-based epochs).
    """

    initial_epoch: int
    epochs: int
    start_batch: int
    stop_at: tuple[int, int] | None
    validate_epochs: list[int]


def plan_calls(
    epoch: int,
    batch: int,
    *,
    target: Length,
    steps_per_epoch: int | None,
    validation_period: Length | None,
) -> list[FitCall]:
    """The calls from ``(epoch, batch)`` to ``target``; validation at every period and at the end.

    Without a period, every epoch end is validated (Keras's own default).
    """
    if steps_per_epoch is None:
        return _plan_by_epochs(epoch, batch, target, validation_period)
    s = steps_per_epoch
    cur = epoch * s + batch
    end = target.epochs * s if target.epochs is not None else target.value

    def validates_at(point: int) -> bool:
        if point == end:
            return True
        if validation_period is None:
            return point % s == 0
        if validation_period.batches is not None:
            return point % validation_period.batches == 0
        return point % (validation_period.value * s) == 0

    calls = []
    while cur < end:
        e, b = divmod(cur, s)
        limit = min(end, (e + 1) * s) if b else end  # mid-epoch start: that epoch only
        stop = _next_mid_epoch_validation(cur, limit, s, validation_period)
        last_epoch = math.ceil(stop / s)
        calls.append(FitCall(
            initial_epoch=e, epochs=last_epoch, start_batch=b,
            stop_at=divmod(stop, s) if stop % s else None,
            validate_epochs=[k + 1 for k in range(e, last_epoch)
                             if validates_at(min((k + 1) * s, stop))],
        ))
        cur = stop
    return calls


def _next_mid_epoch_validation(cur: int, limit: int, s: int, period: Length | None) -> int:
    """The first validation point in ``(cur, limit]`` inside an epoch, else ``limit``."""
    if period is None or period.batches is None:
        return limit  # epoch periods validate at epoch ends only
    p = (cur // period.batches + 1) * period.batches
    while p < limit and p % s == 0:  # at an epoch end: Keras validates there anyway
        p += period.batches
    return min(p, limit)


def _plan_by_epochs(
    epoch: int, batch: int, target: Length, period: Length | None
) -> list[FitCall]:
    """Input of unknown length: whole epochs only, so everything must be in epochs."""
    if target.epochs is None:
        raise UsageError("context.fit: a length in batches needs input of known length (numpy, a "
                         "Sequence, a finite tf.data.Dataset or steps_per_epoch)")
    every = 1 if period is None else period.epochs  # validate every `every` epochs
    if every is None:
        raise UsageError("context.fit: min_validation_period in batches needs input of known "
                         "length (numpy, a Sequence, a finite tf.data.Dataset or steps_per_epoch)")
    if batch:
        raise UsageError("context.fit: cannot resume a tf.data.Dataset of unknown length in "
                         "mid-epoch; pass steps_per_epoch")
    if epoch >= target.epochs:
        return []
    validate = [k for k in range(epoch + 1, target.epochs + 1)
                if k % every == 0 or k == target.epochs]
    return [FitCall(epoch, target.epochs, 0, None, validate)]
