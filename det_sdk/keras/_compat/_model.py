"""A model's structure and what its class overrides: its layers, its own ``call``,
``train_step``, ``test_step`` or ``compile``, tracing its step ahead of the first.

>>> m = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
>>> layers_of(m)[0] is m, overrides_train_step(m)
(True, False)
"""

from __future__ import annotations

import logging
from typing import Any

import tensorflow as tf

from det_sdk.keras._compat._impl import impl
from det_sdk.keras._compat._version import keras

__all__ = [
    "check_has_config",
    "implements_call",
    "layers_of",
    "overrides_compile",
    "overrides_test_step",
    "overrides_train_step",
    "trace_train_step",
    "turn_off_xla",
]


def layers_of(model: Any) -> list[Any]:
    """The model and every layer inside it, depth first, each once."""
    return list(model._flatten_layers(include_self=True, recursive=True))


def implements_call(model: Any) -> bool:
    """Whether ``model``'s class defines ``call()`` (Keras's base raises NotImplementedError;
    a model whose own ``train_step`` does the work needs none)."""
    return type(model).call is not keras.Model.call



def check_has_config(model: Any) -> None:
    """Raise ``NotImplementedError`` where Keras has no config of ``model``. Keras 3
    raises in ``get_config`` itself; Keras 2 logs a warning and returns an empty
    config (a subclassed model whose ``__init__`` takes objects), checked here."""
    impl.check_has_config(model)


def overrides_test_step(model: Any) -> bool:
    """Whether ``model``'s class defines its own ``test_step`` (which may return values
    that are not metrics)."""
    return type(model).test_step is not keras.Model.test_step



def overrides_train_step(model: Any) -> bool:
    """Whether ``model``'s class defines its own ``train_step`` (which may build layers
    and optimizers on first use)."""
    return type(model).train_step is not keras.Model.train_step



def trace_train_step(model: Any, batch: Any) -> bool:
    """Create every variable ``model.train_step`` makes on first use, without a step.

    Keras (TensorFlow backend) builds such state when it traces its train function: a
    model whose ``train_step`` calls layers that were never built (no ``call()``), or
    applies optimizers that were never used (a GAN's two). Tracing ``train_step`` on
    one batch does the same: layers and optimizers create their variables, each
    optimizer for exactly the variables it updates, and nothing runs (no weight,
    optimizer or random state changes). Then those variables can be restored from a
    checkpoint and broadcast before the first step.

    Returns False when ``train_step`` cannot be traced (a model compiled with
    ``run_eagerly=True`` whose step reads values with ``.numpy()``): its variables are
    then made in its first step, as Keras makes them.
    """
    step = tf.function(model.train_step, jit_compile=False)
    try:
        step.get_concrete_function(tf.nest.map_structure(tf.convert_to_tensor, batch))
    except Exception as err:  # the user's step, traced: whatever it raises
        logging.getLogger("det_sdk.keras").debug(
            "det_sdk: train_step not traced ahead of the first step: %s", err)
        return False
    return True


def overrides_compile(model: Any) -> bool:
    """Whether ``model``'s class defines its own ``compile`` (Keras's record of the
    base ``compile``'s arguments then cannot compile it again)."""
    return type(model).compile is not keras.Model.compile



def turn_off_xla(model: Any) -> bool:
    """Compile ``model``'s step functions without XLA; True if XLA was on.

    Horovod's collectives have no XLA kernels, and Keras 3 turns XLA on by default
    on a GPU (``jit_compile="auto"``); Keras 2 leaves it off unless asked.
    """
    if not getattr(model, "jit_compile", False):
        return False
    model.jit_compile = False
    # Step functions made before were compiled with XLA: make them anew.
    model.train_function = model.test_function = model.predict_function = None
    return True
