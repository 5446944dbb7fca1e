"""The switch that makes an optimizer's next dense updates write new buffers, and the
pieces of an update both Keras majors share (:func:`._fresh_buffers.fresh_buffer_updates`
installs them, each Keras its own way)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import tensorflow as tf

__all__ = ["FreshBufferSwitch", "as_computed", "disarming"]


class FreshBufferSwitch:
    """Whether one optimizer's dense updates write new buffers: for the step after a snapshot.

    A snapshot holds the variables' buffers while training goes on; an update in
    place must then first copy the whole buffer (copy on write, on the training
    thread). Written as ``var.assign(var + delta)`` instead, TensorFlow's assign
    adopts the sum's new buffer and the snapshot keeps the old one: no copy. One
    such step is enough (after it the variables own new buffers, which nothing
    else holds), and every step is not free: a new buffer per update costs about
    7% of a memory-bound step (2.2 ms of 30 ms for 10M parameters with Adam,
    measured), against about 0.2 ms for the switch's branch. So the traced update
    branches on ``flag``: a snapshot arms it (:meth:`arm`, eagerly) and the
    optimizer's own apply disarms it in the graph once its updates are done.

    Under a ``tf.distribute`` strategy the flag would be a distributed variable
    (created on every worker, collectively): there every update writes a new
    buffer, as before the switch existed (``flag`` is None).
    """

    def __init__(self) -> None:
        self.flag: Any = None
        self._true: Any = None
        if not tf.distribute.has_strategy():
            with tf.init_scope():  # eager even if the first trace asks for it
                self.flag = tf.Variable(False, trainable=False, name="det_sdk_fresh_buffers")
                with tf.device(self.flag.device):
                    self._true = tf.constant(True)

    def update(self, fresh: Callable[[], Any], in_place: Callable[[], Any]) -> None:
        """In a trace: ``fresh()`` (the update into a new buffer) when armed, else
        ``in_place()``."""
        if self.flag is None:
            fresh()
            return

        def armed() -> Any:
            fresh()
            return tf.constant(True)

        def unarmed() -> Any:
            in_place()
            return tf.constant(False)

        tf.cond(self.flag, armed, unarmed)

    def arm(self) -> None:
        """The next step's dense updates write new buffers (a snapshot holds the old).

        One ``AssignVariableOp`` executed directly: ``flag.assign(True)`` (a constant
        made, weak-type and shape checks, a read of the new value) cost 0.6 ms at an
        epoch's end, half a checkpoint's time on the training thread, this 0.06 ms.
        """
        if self.flag is None:
            return
        from tensorflow.python.eager import context, execute

        try:
            execute.execute(b"AssignVariableOp", num_outputs=0,
                            inputs=[self.flag.handle, self._true],
                            attrs=("dtype", tf.bool.as_datatype_enum, "validate_shape", False),
                            ctx=context.context())
        except (tf.errors.OpError, AttributeError, TypeError, ValueError):
            self.flag.assign(True)  # a TensorFlow without the op under that name

    def after_apply(self) -> None:
        """In a trace, after the optimizer's updates: the steps after that update in place."""
        if self.flag is not None and not tf.executing_eagerly():
            self.flag.assign(False)


def disarming(apply: Callable[..., Any], switch: FreshBufferSwitch) -> Callable[..., Any]:
    @functools.wraps(apply)
    def applied(*args: Any, **kwargs: Any) -> Any:
        result = apply(*args, **kwargs)
        switch.after_apply()
        return result

    return applied


def as_computed(delta: Any) -> Any:
    """``delta`` as computed, not merged into the update: Grappler's arithmetic
    optimizer would fold ``var + (a + b)`` into one sum of three and round it
    differently from the in-place add. ``Snapshot`` stops it and passes the
    buffer on (no copy when the update is its only reader)."""
    return tf.raw_ops.Snapshot(input=delta)
