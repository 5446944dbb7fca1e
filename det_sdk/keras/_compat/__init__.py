"""Which Keras is running: the one package that asks, so nothing else branches on it.

det_sdk runs on Keras 3 (TensorFlow 2.16-2.21, where ``tf.keras`` is Keras 3) and
on Keras 2 (TensorFlow 2.15's own ``tf.keras``, or ``tf-keras`` on newer TF with
``TF_USE_LEGACY_KERAS=1``). Scripts write ``from tensorflow import keras`` on
both; what differs is the machinery under the public API, which this package
hides behind small functions, one module per concern:

- ``_version``: which Keras runs (``KERAS_MAJOR``, ``KERAS_VERSION``, ``keras``);
- ``_impl``: the one place that picks ``_keras3`` or ``_keras2``, which define the
  same names, each for its Keras; the modules below call them and never ask;
- ``_data``: ``SequenceBase``, predicting batch by batch;
- ``_model``: a model's layers and what its class overrides, tracing its step;
- ``_variables``: which objects are variables, the ``tf.Variable`` behind a Keras
  variable (what Horovod can broadcast), reading them at once;
- ``_random``: seeds, each rank's random state (``SeedGenerator`` variables on
  Keras 3, ``tf.random.Generator`` objects on Keras 2), random ops no checkpoint holds;
- ``_optimizers``: optimizer internals, and averaging gradients where the optimizer
  applies them (``apply`` on Keras 3, ``apply_gradients`` on Keras 2); ``_share``:
  this process's share of a step's gradients;
- ``_finalize``: the weights' overwrite by their averages (``use_ema``) that ends a
  ``fit``, done once per training however many ``model.fit`` calls it takes;
- ``_fresh_buffers`` (and ``_switch``): updates into new buffers after a snapshot;
- ``_metrics`` and ``_callbacks``: metric state, ``evaluate``'s order, callbacks'
  state attributes and small API moves (``History.model`` is read-only on Keras 3).

Every name the rest of det_sdk uses is imported from here (``_compat.keras``,
``_compat.model_optimizer``, ...).

>>> KERAS_MAJOR in (2, 3)
True
"""

from __future__ import annotations

from det_sdk.keras._compat._callbacks import (
    callback_state_attributes,
    set_history_model,
    swaps_averages_in_between_epochs,
)
from det_sdk.keras._compat._data import (
    SequenceBase,
    predict_batches,
    unread_iterators_between_passes,
)
from det_sdk.keras._compat._finalize import FinalizeOnce, overwrites_weights
from det_sdk.keras._compat._fresh_buffers import arm_fresh_buffers, fresh_buffer_updates
from det_sdk.keras._compat._metrics import metric_results, metric_variables, metrics_in_order
from det_sdk.keras._compat._model import (
    check_has_config,
    implements_call,
    layers_of,
    overrides_compile,
    overrides_test_step,
    overrides_train_step,
    trace_train_step,
    turn_off_xla,
)
from det_sdk.keras._compat._optimizers import (
    OPTIMIZER_TYPES,
    AverageFn,
    average_in_place,
    average_outermost,
    averaging_optimizer,
    gradient_share,
    is_averaging,
    learning_rate,
    model_optimizer,
    optimizer_built,
    optimizer_trains_only,
    optimizer_variables,
    set_learning_rate,
    wrapped_chain,
)
from det_sdk.keras._compat._random import (
    UNSAVED_RANDOM_FIX,
    UNSAVED_RANDOM_OPS,
    distinct_random_state,
    rng_variables,
    set_seeds,
    unsaved_random_ops,
)
from det_sdk.keras._compat._share import count_rows, weigh_alike
from det_sdk.keras._compat._variables import (
    backing_variable,
    is_numeric_variable,
    lookup_layers,
    model_variables,
    moving_statistics,
    overwritten_by_gradient,
    read_variables,
    refresh_preprocessing,
    shared_state_variables,
    variable_name,
)
from det_sdk.keras._compat._version import (
    KERAS_MAJOR,
    KERAS_PACKAGE,
    KERAS_VERSION,
    MULTI_WORKER_FIT,
    keras,
)

__all__ = [
    "KERAS_MAJOR",
    "KERAS_PACKAGE",
    "KERAS_VERSION",
    "MULTI_WORKER_FIT",
    "OPTIMIZER_TYPES",
    "UNSAVED_RANDOM_FIX",
    "UNSAVED_RANDOM_OPS",
    "AverageFn",
    "FinalizeOnce",
    "SequenceBase",
    "arm_fresh_buffers",
    "average_in_place",
    "average_outermost",
    "averaging_optimizer",
    "backing_variable",
    "callback_state_attributes",
    "check_has_config",
    "count_rows",
    "distinct_random_state",
    "fresh_buffer_updates",
    "gradient_share",
    "implements_call",
    "is_averaging",
    "is_numeric_variable",
    "keras",
    "layers_of",
    "learning_rate",
    "lookup_layers",
    "metric_results",
    "metric_variables",
    "metrics_in_order",
    "model_optimizer",
    "model_variables",
    "moving_statistics",
    "optimizer_built",
    "optimizer_trains_only",
    "optimizer_variables",
    "overrides_compile",
    "overrides_test_step",
    "overrides_train_step",
    "overwrites_weights",
    "overwritten_by_gradient",
    "predict_batches",
    "read_variables",
    "refresh_preprocessing",
    "rng_variables",
    "set_history_model",
    "set_learning_rate",
    "set_seeds",
    "shared_state_variables",
    "swaps_averages_in_between_epochs",
    "trace_train_step",
    "turn_off_xla",
    "unread_iterators_between_passes",
    "unsaved_random_ops",
    "variable_name",
    "weigh_alike",
    "wrapped_chain",
]
