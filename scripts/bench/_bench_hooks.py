"""Timing of det_sdk's injected callback hooks, shared by the benchmark scripts (--profile).

    profile = HookProfile()
    with profile.installed():
        profile.active = True
        context.fit(...)
    profile.report(runs=1)
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import tensorflow as tf


class HookProfile:
    """Wall time spent in each hook of some Keras callback classes while ``active``.

    ``total``/``calls`` add up over everything measured, per ``Class.hook``;
    ``seconds`` is their sum since the caller last set it to 0.
    """

    HOOKS = (
        "on_train_begin", "on_train_end", "on_epoch_begin", "on_epoch_end",
        "on_train_batch_begin", "on_train_batch_end", "on_test_begin", "on_test_end",
        "on_test_batch_begin", "on_test_batch_end",
    )

    def __init__(self, enabled: bool = True) -> None:
        self.total: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.seconds = 0.0
        self.active = False
        # disabled: wrapping() changes nothing (the timers' own cost, about a microsecond
        # a call, stays out of what is measured around them)
        self.enabled = enabled

    @contextmanager
    def wrapping(self, classes: list[type]) -> Iterator[None]:
        """Wrap each hook a class defines itself; put the originals back on the way out."""
        saved: list[tuple[type, str, Callable[..., Any]]] = []
        for cls in classes if self.enabled else []:
            for hook in self.HOOKS:
                if hook in vars(cls):
                    original = vars(cls)[hook]
                    saved.append((cls, hook, original))
                    setattr(cls, hook, self._wrap(f"{cls.__name__}.{hook}", original))
        try:
            yield
        finally:
            for cls, hook, original in saved:
                setattr(cls, hook, original)

    def installed(self) -> contextlib.AbstractContextManager[None]:
        """Wrap the hooks of det_sdk's injected callbacks while inside."""
        from det_sdk.keras import _callbacks

        return self.wrapping([
            cls for name in _callbacks.__all__
            if isinstance(cls := getattr(_callbacks, name), type)
            and issubclass(cls, tf.keras.callbacks.Callback)
        ])

    def _wrap(self, key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.active:
                return fn(*args, **kwargs)
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.perf_counter() - t0
                self.total[key] += spent
                self.calls[key] += 1
                self.seconds += spent

        return timed

    def as_dict(self) -> dict[str, list[float]]:
        """``{hook: [seconds, calls]}``, the most expensive first."""
        return {k: [round(v, 5), self.calls[k]] for k, v in
                sorted(self.total.items(), key=lambda kv: -kv[1])}

    def report(self, runs: int) -> None:
        print(f"\ninjected callback hooks, per context.fit (mean of {runs} runs):")
        for key, total in sorted(self.total.items(), key=lambda kv: -kv[1]):
            calls = self.calls[key] / runs
            print(f"  {key:<40} {1e3 * total / runs:8.2f} ms  ({calls:.0f} calls)")
