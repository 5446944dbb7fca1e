"""Keras 2's side of each difference (TensorFlow 2.15's ``tf.keras``, or ``tf-keras``).

:mod:`._keras3` defines the same names for Keras 3; :mod:`._impl` imports the one that
runs. Nothing here asks which Keras runs: these are written for Keras 2 alone (the
module imports on Keras 3 too, for the doctest run, and is never called there).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from det_sdk.keras._compat._share import AverageFn, MixinBase, combined, divided_loss
from det_sdk.keras._compat._switch import FreshBufferSwitch, as_computed, disarming
from det_sdk.keras._compat._version import keras

__all__ = [
    "CALLBACK_STATE_EXTRA",
    "UNSAVED_RANDOM_FIX",
    "AveragingMixin",
    "backing_variable",
    "check_has_config",
    "install_fresh_buffers",
    "is_variable",
    "keras_rng_variables",
    "learning_rate_of",
    "metrics_in_order",
    "optimizer_built",
    "optimizer_trains_only",
    "optimizer_types",
    "optimizer_variables",
    "predict_batches",
    "random_generator_layers",
    "set_learning_rate",
]

#: Callback state attributes Keras 2 adds to ``_callbacks``' common ones: ModelCheckpoint's
#: epoch counter (its ``period``).
CALLBACK_STATE_EXTRA: dict[str, tuple[str, ...]] = {"ModelCheckpoint": ("epochs_since_last_save",)}

#: How to draw random numbers a checkpoint holds, on Keras 2.
UNSAVED_RANDOM_FIX = (
    "draw with a tf.random.Generator kept on the model (self.gen = "
    "tf.random.Generator.from_seed(seed) in __init__; self.gen.normal(shape))")


def optimizer_types() -> tuple[type, ...]:
    """The base classes of Keras 2's optimizers, the legacy ones included."""
    return (keras.optimizers.Optimizer, keras.optimizers.legacy.Optimizer)


def predict_batches(model: Any, batches: Iterator[tuple[int, Any]]
                    ) -> Iterator[tuple[int, Any]]:
    """Keras 2's ``predict_on_batch`` builds a ``tf.data`` pipeline and an iterator per
    call (0.56x the throughput of ``model.predict`` at 4,096 rows a batch), so the
    model's own predict function (the one ``model.predict`` runs: same graph, same
    numbers) is fed one generator-backed dataset; a batch whose shapes differ from the
    ones before starts a new dataset (a new trace), as ``model.predict`` would retrace.
    """
    steps = getattr(model, "_steps_per_execution", None)
    if steps is not None and int(steps.numpy()) != 1:
        # (with steps_per_execution > 1 its predict function concatenates that many
        # batches; one batch per call is what predict_on_batch arranges)
        for index, inputs in batches:
            yield index, model.predict_on_batch(inputs)
        return
    predict = model.make_predict_function()
    pending = next(batches, None)
    while pending is not None:
        spec = _batch_spec(pending[1])
        order: list[int] = []
        failure: list[BaseException] = []

        def feed(spec: Any = spec, order: list[int] = order, failure: list[BaseException] = failure
                 ) -> Iterator[Any]:
            nonlocal pending
            try:
                while pending is not None and _batch_spec(pending[1]) == spec:
                    index, inputs = pending
                    order.append(index)
                    yield inputs
                    pending = next(batches, None)
            except BaseException as err:  # the input's own error, not tf.data's wrapping of it
                failure.append(err)

        with model.distribute_strategy.scope():
            iterator = iter(tf.data.Dataset.from_generator(feed, output_signature=spec))
        done = 0
        while True:
            try:
                outputs = predict(iterator)
            except (StopIteration, tf.errors.OutOfRangeError):
                break
            yield order[done], tf.nest.map_structure(np.asarray, outputs)
            done += 1
        if failure:
            raise failure[0]


def _batch_spec(inputs: Any) -> Any:
    """The TensorSpecs of a batch, its batch dimension unknown (as ``model.predict``'s
    dataset has it)."""
    return tf.nest.map_structure(
        lambda a: tf.TensorSpec((None, *np.shape(a)[1:]), tf.as_dtype(a.dtype)), inputs)


def random_generator_layers() -> None:
    """Make layers draw through ``tf.random.Generator`` objects, whose state is a variable
    that checkpoints can save."""
    keras.backend.experimental.enable_tf_random_generator()


def check_has_config(model: Any) -> None:
    """Keras 2 logs a warning and returns an empty config for a subclassed model whose
    ``__init__`` takes objects: raise ``NotImplementedError`` as Keras 3 does."""
    if getattr(model, "_is_graph_network", False):
        return
    from keras.src.utils import generic_utils  # Keras 2 (tf.keras 2.15)

    if generic_utils.is_default(model.get_config):
        keras.layers.Layer.get_config(model)  # NotImplementedError: args not serializable


def keras_rng_variables(layer: Any) -> list[Any]:
    """The state of the ``tf.random.Generator`` behind ``layer``'s random generator."""
    rg = getattr(layer, "_random_generator", None)
    if rg is None or not hasattr(rg, "_maybe_init"):
        return []
    rg._maybe_init()
    gen = getattr(rg, "_generator", None)
    return [gen.state] if isinstance(gen, tf.random.Generator) else []


def is_variable(v: Any) -> bool:
    """A ``tf.Variable``."""
    return isinstance(v, tf.Variable)


def backing_variable(var: Any) -> Any:
    """Keras 2's variables are ``tf.Variable`` objects."""
    return var


def optimizer_built(opt: Any) -> bool:
    """Whether ``opt`` has its variables."""
    if isinstance(opt, keras.optimizers.legacy.Optimizer):
        return bool(opt.weights)
    return bool(getattr(opt, "_built", False))


def optimizer_trains_only(opt: Any, variables: Sequence[Any]) -> bool:
    """True if ``opt`` has been built, for some of ``variables`` and nothing else."""
    built_for = getattr(opt, "_index_dict", None)  # Keras 2's (non-legacy) optimizers
    if not getattr(opt, "_built", False) or not built_for:
        return False
    return set(built_for) <= {opt._var_key(v) for v in variables}


def optimizer_variables(opt: Any, trainable: Sequence[Any]) -> list[Any]:
    """All of ``opt``'s variables, building it for ``trainable`` first if it has not run."""
    if isinstance(opt, keras.optimizers.legacy.Optimizer):
        opt._create_all_weights(list(trainable))  # idempotent
        return [*opt.variables(), *_loss_scale_variables(opt)]
    if not getattr(opt, "_built", False):
        opt.build(list(trainable))
    return [*opt.variables, *_loss_scale_variables(opt)]


def _loss_scale_variables(opt: Any) -> list[Any]:
    """A loss-scale optimizer's dynamic scale and its counter of good steps: Keras 2's
    ``variables`` lists its inner optimizer's alone (a resumed run would start again
    from the initial scale)."""
    state = getattr(opt, "_loss_scale", None)
    found = [getattr(state, name, None) for name in ("counter", "current_loss_scale")]
    return [v for v in found if isinstance(v, tf.Variable)]


class AveragingMixin(MixinBase):
    """Averages gradients in ``apply_gradients``, where Keras 2 optimizers apply them."""

    _det_average: AverageFn | None  # None: an outer optimizer averaged already

    def get_scaled_loss(self, loss: Any) -> Any:
        # A loss-scale optimizer's alone (its compute_gradients calls it): the loss
        # divided by the process count (_share.divided_loss)
        return super().get_scaled_loss(divided_loss(self, loss))

    def apply_gradients(self, grads_and_vars: Any, *args: Any, **kwargs: Any) -> Any:
        pairs = list(grads_and_vars)
        grads = [g for g, _ in pairs]
        if self._det_average is not None:
            grads = combined(self, grads)
        # a mixin: apply_gradients is the optimizer class's, after this one in the MRO
        return super().apply_gradients(
            list(zip(grads, [v for _, v in pairs])), *args, **kwargs)


def install_fresh_buffers(opt: Any) -> FreshBufferSwitch | None:
    """Keras 2 optimizers call the variables' own methods in ``update_step``: while ``opt``
    traces its ``update_step`` (and only then, in this thread), resource variables'
    ``assign_add``/``assign_sub`` branch on the switch returned; it applies through
    ``apply_gradients``, which disarms it. None for a legacy (fused-kernel) optimizer,
    which keeps updating in place."""
    if not hasattr(opt, "update_step") or isinstance(opt, keras.optimizers.legacy.Optimizer):
        return None
    switch = FreshBufferSwitch()
    opt.update_step = _with_fresh_buffer_variables(opt.update_step, switch)
    opt.apply_gradients = disarming(opt.apply_gradients, switch)
    return switch


_tracing_fresh = threading.local()  # .switch: the switch of an update_step being traced here


def _with_fresh_buffer_variables(update_step: Callable[..., Any], switch: FreshBufferSwitch
                                 ) -> Callable[..., Any]:
    _fresh_variable_updates()

    def traced(*args: Any, **kwargs: Any) -> Any:
        before = getattr(_tracing_fresh, "switch", None)
        _tracing_fresh.switch = switch
        try:
            return update_step(*args, **kwargs)
        finally:
            _tracing_fresh.switch = before

    return traced


def _fresh_variable_updates() -> None:
    """Keras 2: resource variables' in-place add and subtract branch on the switch of the
    optimizer whose ``update_step`` is being traced (installed once).

    Every resource variable class builds ``assign_add``/``assign_sub`` on the two
    generated ops, so those are what is replaced: armed, a read, the arithmetic,
    and an assign, which TensorFlow orders among the variable's other uses as it
    did the in-place op.
    """
    from tensorflow.python.ops import gen_resource_variable_ops as ops

    if getattr(ops, "_det_fresh_buffers", False):
        return

    def fresh(in_place: Callable[..., Any], op: Callable[[Any, Any], Any]
              ) -> Callable[..., Any]:
        def update(resource: Any, value: Any, name: Any = None) -> Any:
            switch = getattr(_tracing_fresh, "switch", None)
            if switch is None or tf.executing_eagerly():
                return in_place(resource, value, name=name)

            def fresh_update() -> Any:
                current = ops.read_variable_op(resource, value.dtype)
                return ops.assign_variable_op(resource, op(current, as_computed(value)),
                                              name=name)

            switch.update(fresh_update, lambda: in_place(resource, value, name=name))
            return None

        return functools.wraps(in_place)(update)

    ops.assign_add_variable_op = fresh(ops.assign_add_variable_op, tf.add)
    ops.assign_sub_variable_op = fresh(ops.assign_sub_variable_op, tf.subtract)
    ops._det_fresh_buffers = True


def metrics_in_order(model: Any, logs: Mapping[str, Any]) -> list[Any]:
    """``evaluate``'s list result from its dict result, in Keras's own order."""
    names = list(model.metrics_names)
    ordered = [logs[n] for n in names if n in logs]
    return ordered + [v for k, v in logs.items() if k not in names]


def learning_rate_of(opt: Any) -> Any:
    """``opt``'s learning rate as it holds it (outside ``variables`` on Keras 2)."""
    return getattr(opt, "lr", None)


def set_learning_rate(opt: Any, value: float) -> None:
    """Set ``opt``'s learning rate to ``value``."""
    keras.backend.set_value(opt.lr, value)


def unread_iterators_between_passes(steps_given: bool) -> int:
    """``iter(dataset)`` calls ``model.fit`` makes between two passes besides the one it
    reads next: none (Keras 2's DataHandler makes one per epoch it recreates)."""
    return 0
