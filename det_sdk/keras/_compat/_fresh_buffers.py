"""Optimizer updates that write new buffers for the step after a checkpoint's snapshot,
so that the snapshot costs the training step no copy.

>>> opt = keras.optimizers.SGD(0.1)
>>> fresh_buffer_updates(opt), fresh_buffer_updates(opt)
(True, False)
>>> arm_fresh_buffers(opt)
"""

from __future__ import annotations

from typing import Any

from det_sdk.keras._compat._impl import impl
from det_sdk.keras._compat._optimizers import wrapped_chain
from det_sdk.keras._compat._switch import FreshBufferSwitch
from det_sdk.keras._compat._version import keras  # noqa: F401 - the doctest's

__all__ = ["arm_fresh_buffers", "fresh_buffer_updates"]


def fresh_buffer_updates(opt: Any) -> bool:
    """Let ``opt`` write its dense updates into new buffers after a snapshot; True if this
    changed it (:func:`arm_fresh_buffers` arms it for one step).

    A checkpoint's snapshot holds the variables' buffers while training goes on.
    An update in place must then first copy the whole buffer (copy on write): for
    a 50M-parameter model with Adam, 570 MiB copied by the training step after
    each checkpoint, about 40 ms on 2 cores. Once armed, the optimizer's next
    step writes each update as ``var.assign(var + delta)``: TensorFlow's assign
    adopts the sum's new buffer and the snapshot keeps the old one. No copy, the
    same arithmetic (bit-equal results), and the steps after it update in place
    again (:class:`._switch.FreshBufferSwitch` says why not always).

    Keras 3 optimizers update through ``optimizer.assign_add``/``assign_sub``,
    which this replaces on ``opt``, and apply through ``apply``. Keras 2's call
    the variables' own methods in ``update_step``: while this optimizer traces its
    ``update_step`` (and only then, in this thread), resource variables'
    ``assign_add``/``assign_sub`` take the same form; it applies through
    ``apply_gradients``. A loss-scale optimizer's inner one is changed too; sparse
    updates, eager calls and Keras 2's legacy (fused-kernel) optimizers keep
    updating in place. A step function traced before this call keeps the old
    updates.
    """
    changed = False
    for wrapped in wrapped_chain(opt):
        if getattr(wrapped, "_det_fresh_buffers", None) is None:
            switch = impl.install_fresh_buffers(wrapped)
            if switch is not None:
                wrapped._det_fresh_buffers = switch  # a plain object: no tracker saves it
                changed = True
    return changed


def arm_fresh_buffers(opt: Any) -> None:
    """The next step of ``opt`` (and of the optimizers it wraps) writes its dense updates
    into new buffers: a snapshot just took the current ones (:func:`fresh_buffer_updates`)."""
    for wrapped in wrapped_chain(opt):
        switch = getattr(wrapped, "_det_fresh_buffers", None)
        if isinstance(switch, FreshBufferSwitch):
            switch.arm()
