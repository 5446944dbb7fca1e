"""Seconds per call of a TensorFlow function, its result read back: the benchmarks' one clock.

A call of a ``tf.function`` returns before its work is done when the work runs
asynchronously; reading one value of the last result back waits for it, so the time
per call is the work's, not the dispatch's.

>>> class Out:
...     def numpy(self): return [[1.0]]
>>> per_call(lambda: [Out()], calls=3) >= 0
True
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np


def per_call(fn: Callable[[], Any], calls: int) -> float:
    """Seconds per call of ``fn`` over ``calls`` calls after one warm-up call.

    ``fn`` returns a sequence of tensors; the first one's first value is read back.
    """
    fn()
    start = time.perf_counter()
    for _ in range(calls):
        out = fn()
    float(np.asarray(out[0].numpy()).ravel()[0])
    return (time.perf_counter() - start) / calls
