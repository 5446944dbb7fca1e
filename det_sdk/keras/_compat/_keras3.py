"""Keras 3's side of each difference (TensorFlow 2.16-2.21's ``tf.keras``).

:mod:`._keras2` defines the same names for Keras 2; :mod:`._impl` imports the one that
runs. Nothing here asks which Keras runs: these are written for Keras 3 alone (the
module imports on Keras 2 too, for the doctest run, and is never called there).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

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

#: Callback state attributes Keras 3 adds to ``_callbacks``' common ones: TensorBoard's
#: test-batch counter.
CALLBACK_STATE_EXTRA: dict[str, tuple[str, ...]] = {"TensorBoard": ("_global_test_batch",)}

#: How to draw random numbers a checkpoint holds, on Keras 3.
UNSAVED_RANDOM_FIX = (
    "draw with keras.random.normal(shape, seed=self.seed_generator), "
    "self.seed_generator = keras.random.SeedGenerator(seed) made in __init__")


def optimizer_types() -> tuple[type, ...]:
    """The base classes of Keras 3's optimizers."""
    return (keras.optimizers.Optimizer,)


def predict_batches(model: Any, batches: Iterator[tuple[int, Any]]
                    ) -> Iterator[tuple[int, Any]]:
    """Keras 3's ``predict_on_batch`` is a call of the model's compiled predict function."""
    for index, inputs in batches:
        yield index, model.predict_on_batch(inputs)


def random_generator_layers() -> None:
    """Keras 3 layers always keep their random state in ``SeedGenerator`` variables."""


def check_has_config(model: Any) -> None:
    """Keras 3 raises ``NotImplementedError`` in ``get_config`` itself."""


def keras_rng_variables(layer: Any) -> list[Any]:
    """The state variables of ``layer``'s own ``SeedGenerator`` objects."""
    return [sg.state for sg in getattr(layer, "_seed_generators", ()) if sg.state is not None]


def is_variable(v: Any) -> bool:
    """A ``tf.Variable`` or a ``keras.Variable``."""
    return isinstance(v, (tf.Variable, keras.Variable))


def backing_variable(var: Any) -> Any:
    """The ``tf.Variable`` a ``keras.Variable`` wraps."""
    return var.value if isinstance(var, keras.Variable) else var


def optimizer_built(opt: Any) -> bool:
    """Whether ``opt`` has its variables."""
    return bool(opt.built)


def optimizer_trains_only(opt: Any, variables: Sequence[Any]) -> bool:
    """True if ``opt`` has been built, for some of ``variables`` and nothing else."""
    if not opt.built:
        return False
    own = {id(v) for v in variables}
    return all(id(v) in own for v in opt._trainable_variables)


def optimizer_variables(opt: Any, trainable: Sequence[Any]) -> list[Any]:
    """All of ``opt``'s variables, building it for ``trainable`` first if it has not run."""
    if not opt.built:
        opt.build(list(trainable))
    return list(opt.variables)


class AveragingMixin(MixinBase):
    """Averages gradients in ``apply``, where Keras 3 optimizers apply them (``fit``'s
    ``apply_gradients`` and a custom step's ``apply`` both go through it)."""

    _det_average: AverageFn | None  # None: an outer optimizer averaged already

    def scale_loss(self, loss: Any) -> Any:
        # a loss-scale optimizer's loss, divided by the process count (_share.divided_loss)
        return super().scale_loss(divided_loss(self, loss))

    def apply(self, grads: Any, trainable_variables: Any = None) -> Any:
        if self._det_average is not None:
            grads = combined(self, list(grads))
        # a mixin: apply is the optimizer class's, after this one in the MRO
        return super().apply(grads, trainable_variables)


def install_fresh_buffers(opt: Any) -> FreshBufferSwitch | None:
    """Keras 3 optimizers update through ``opt.assign_add``/``assign_sub``, replaced here
    on ``opt`` by updates that branch on the switch returned, and apply through
    ``apply``, which disarms it."""
    switch = FreshBufferSwitch()
    opt.assign_add = _fresh_buffer_update(opt.assign_add, tf.add, switch)
    opt.assign_sub = _fresh_buffer_update(opt.assign_sub, tf.subtract, switch)
    opt.apply = disarming(opt.apply, switch)
    return switch


def _fresh_buffer_update(in_place: Callable[[Any, Any], Any], op: Callable[[Any, Any], Any],
                         switch: FreshBufferSwitch) -> Callable[[Any, Any], Any]:
    def update(variable: Any, value: Any) -> Any:
        var = backing_variable(variable)
        if (isinstance(value, tf.IndexedSlices) or not isinstance(var, tf.Variable)
                or tf.executing_eagerly()):  # eager: the sum is held, assign would copy it
            return in_place(variable, value)
        delta = tf.cast(value, var.dtype)
        switch.update(lambda: var.assign(op(var, as_computed(delta))),
                      lambda: in_place(variable, value))
        return None

    return update


def metrics_in_order(model: Any, logs: Mapping[str, Any]) -> list[Any]:
    """``evaluate``'s list result from its dict result, in Keras's own order."""
    ordered = model._flatten_metrics_in_order(dict(logs))  # a lone metric comes bare
    return list(ordered) if isinstance(ordered, (list, tuple)) else [ordered]


def learning_rate_of(opt: Any) -> Any:
    """``opt``'s learning rate as it holds it (a variable, a number or a schedule)."""
    return getattr(opt, "learning_rate", None)


def set_learning_rate(opt: Any, value: float) -> None:
    """Set ``opt``'s learning rate to ``value``."""
    opt.learning_rate = value


def unread_iterators_between_passes(steps_given: bool) -> int:
    """``iter(dataset)`` calls ``model.fit`` makes between two passes over a finite
    dataset besides the one it reads next: Keras 3's epoch iterator makes the next
    iterator as soon as a pass ends, and without ``steps_per_epoch`` makes another at
    the next epoch's start (keras/src/trainers/epoch_iterator.py), reading that one."""
    return 0 if steps_given else 1
