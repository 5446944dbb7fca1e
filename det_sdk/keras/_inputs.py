"""What ``context.fit`` and ``evaluate`` read of their arguments, whatever the data kind:
the rows of each batch Keras makes of numpy data, the validation period, a length in
steps. The fit's data itself is one frozen object, ``_fit_inputs.FitInputs``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np  # noqa: F401 (doctests)

from det_sdk.config import Length
from det_sdk.errors import UsageError
from det_sdk.keras import _data

__all__ = ["batch_rows", "length_in_steps", "validation_period"]


def batch_rows(x: Any, batch_size: int | None) -> Callable[[int], float] | None:
    """Rows of each batch Keras makes of numpy ``x`` (``batch_size``, default 32): batch
    ``i`` -> its rows (the last may be short). None for other data.

    >>> batch_rows(np.zeros((10, 1)), 4)(2)
    2
    """
    if not _data.is_array_data(x):
        return None
    n, bs = _data.num_rows(x), batch_size or 32
    return lambda i: max(0, min(bs, n - i * bs))


def validation_period(configured: Length | None, freq: Any,
                      has_validation: bool) -> Length | None:
    """The config's ``min_validation_period``, else Keras's ``validation_freq`` (``freq``,
    an int); None without validation data (nothing to validate: no extra stops
    mid-epoch).

    >>> validation_period(None, 2, True).epochs, validation_period(None, 2, False)
    (2, None)
    """
    if not has_validation:
        return None
    if configured is not None:
        return configured
    if freq is None or freq == 1:
        return None
    if not isinstance(freq, int) or freq < 1:
        raise UsageError(f"context.fit: validation_freq must be a positive int, got {freq!r} (or "
                         "set min_validation_period in the config)")
    return Length(epochs=freq)


def length_in_steps(length: Length | None, steps: int | None) -> int | None:
    if length is None or steps is None:
        return length.batches if length is not None else None
    return length.epochs * steps if length.epochs is not None else length.batches


