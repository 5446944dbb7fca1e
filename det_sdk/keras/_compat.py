"""Which Keras is running: the one module that asks, so nothing else branches on it.

det_sdk runs on Keras 3 (TensorFlow 2.16-2.21, where ``tf.keras`` is Keras 3) and
on Keras 2 (TensorFlow 2.15's own ``tf.keras``, or ``tf-keras`` on newer TF with
``TF_USE_LEGACY_KERAS=1``). Scripts write ``from tensorflow import keras`` on
both; what differs is the machinery under the public API, which this module
hides behind small functions:

- random state: Keras 3 keeps a layer's random state in ``SeedGenerator``
  variables (in ``model.variables``, not ``model.weights``); Keras 2 in
  ``tf.random.Generator`` objects once ``enable_tf_random_generator()`` is on;
- optimizer internals: which variables an optimizer holds and was built for;
- where gradients are applied (``apply`` on Keras 3, ``apply_gradients`` on
  Keras 2), which is where det_sdk averages them across processes;
- the variable Horovod can broadcast (Keras 3 wraps a ``tf.Variable``);
- small API moves (``History.model`` is read-only on Keras 3, ...).

>>> KERAS_MAJOR in (2, 3)
True
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

__all__ = [
    "KERAS_MAJOR",
    "KERAS_PACKAGE",
    "KERAS_VERSION",
    "OPTIMIZER_TYPES",
    "SequenceBase",
    "arm_fresh_buffers",
    "average_in_place",
    "averaging_optimizer",
    "backing_variable",
    "distinct_random_state",
    "fresh_buffer_updates",
    "is_averaging",
    "is_numeric_variable",
    "keras",
    "layers_of",
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
    "predict_batches",
    "read_variables",
    "refresh_preprocessing",
    "rng_variables",
    "set_history_model",
    "set_seeds",
    "shared_state_variables",
    "trace_train_step",
    "turn_off_xla",
    "variable_name",
]

#: The Keras that ``from tensorflow import keras`` gives the user's script.
keras: Any = tf.keras


def _keras_identity() -> tuple[str, str]:
    """(distribution name, version) of the Keras behind ``tf.keras``."""
    module = getattr(tf.keras, "__name__", "") or ""
    version = getattr(tf.keras, "__version__", None)
    if module.startswith("tf_keras") or "tf_keras" in module:
        return "tf-keras", version or importlib.metadata.version("tf-keras")
    if version is None:
        try:
            version = importlib.metadata.version("keras")
        except importlib.metadata.PackageNotFoundError:  # pragma: no cover - odd installs
            version = "unknown"
    return "keras", str(version)


KERAS_PACKAGE, KERAS_VERSION = _keras_identity()
KERAS_MAJOR = int(KERAS_VERSION.split(".")[0]) if KERAS_VERSION[:1].isdigit() else 2
#: Whether Keras's own fit trains under tf.distribute.MultiWorkerMirroredStrategy: Keras 2
#: does; Keras 3 cannot (keras-team/keras#20585), so its workers train as Horovod's
MULTI_WORKER_FIT = KERAS_MAJOR < 3
_K3 = KERAS_MAJOR >= 3

#: The base class of ``keras.utils.Sequence`` (``PyDataset`` on Keras 3).
SequenceBase: type = keras.utils.Sequence

OPTIMIZER_TYPES: tuple[type, ...] = (
    (keras.optimizers.Optimizer,)
    if _K3
    else (keras.optimizers.Optimizer, keras.optimizers.legacy.Optimizer)
)


# --- predicting batch by batch -----------------------------------------------------------


def predict_batches(model: Any, batches: Iterator[tuple[int, Any]]
                    ) -> Iterator[tuple[int, Any]]:
    """``(index, outputs)`` for each ``(index, inputs)``, in order, as numpy: the
    outputs ``model.predict`` gives for those inputs as one of its batches.

    Keras 3's ``predict_on_batch`` is a call of the model's compiled predict function.
    Keras 2's builds a ``tf.data`` pipeline and an iterator per call (0.56x the
    throughput of ``model.predict`` at 4,096 rows a batch), so there the model's own
    predict function (the one ``model.predict`` runs: same graph, same numbers) is fed
    one generator-backed dataset; a batch whose shapes differ from the ones before
    starts a new dataset (a new trace), as ``model.predict`` would retrace.

    >>> m = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> [(i, o.shape) for i, o in predict_batches(m, iter([(0, np.ones((3, 2)))]))]
    [(0, (3, 1))]
    """
    steps = getattr(model, "_steps_per_execution", None)
    if _K3 or (steps is not None and int(steps.numpy()) != 1):
        # (Keras 2 with steps_per_execution > 1: its predict function concatenates that
        # many batches; one batch per call is what predict_on_batch arranges)
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


# --- seeds and random state -------------------------------------------------------------


def set_seeds(seed: int) -> None:
    """Seed this process's random state: the same ``seed`` on every process.

    Python, NumPy, TensorFlow and Keras's own seeds are the run's seed everywhere, as
    on one process: a script that shuffles, splits or augments its data with
    ``np.random`` / ``random`` before ``wrap_data`` (the keras-io habit) prepares the
    same arrays on every rank, so their shards are disjoint parts of one data set.
    ``tf.data`` ops seeded by the global seed (``shuffle()``, also
    ``shuffle(seed=...)``) likewise give the same order on every process.

    Layers take their seeds from Python's RNG when they are made, so every rank's
    dropout would draw the same masks for different samples:
    :func:`distinct_random_state` (at a fit's start, several processes) folds the
    rank into each layer's random state instead.

    On Keras 2 this also makes layers draw through ``tf.random.Generator`` objects,
    whose state is a variable that checkpoints can save (Keras 3 layers always keep
    theirs in ``SeedGenerator`` variables).

    >>> set_seeds(7)
    """
    keras.utils.set_random_seed(seed % 2**31)
    tf.random.set_seed(seed)
    if not _K3:
        keras.backend.experimental.enable_tf_random_generator()


# A large odd constant (the golden ratio's 32 bits): rank r's seeds are r steps of it
# away from rank 0's, far from the small offsets a counter reaches.
_RANK_STRIDE = 0x9E3779B9


def distinct_random_state(variables: Sequence[Any], rank: int) -> None:
    """Give rank ``rank`` random state of its own in ``variables`` (:func:`rng_variables`;
    rank 0's are left as they are).

    Every rank built its layers from the same Python seed, so their seed generators
    start equal; dropout on two shards would draw the same masks. The rank is folded
    into each generator's seed (Keras 3 ``SeedGenerator``: its seed word;
    ``tf.random.Generator``: its key), which keeps each rank's draws its own and
    reproducible. Call once per variable (a restored checkpoint replaces the state
    with the rank's own saved one).

    >>> gen = tf.random.Generator.from_seed(1)
    >>> before = gen.state.numpy().copy()
    >>> distinct_random_state([gen.state], rank=1)
    >>> bool((gen.state.numpy() != before).any())
    True
    """
    if rank == 0:
        return
    for var in variables:
        state = var.numpy()
        # Keras 3's SeedGenerator state is (seed, counter); a tf.random.Generator's
        # Philox state is (counter, counter, key): the seed word is first, the key last.
        at = 0 if state.shape == (2,) else state.shape[0] - 1
        word = np.asarray(state[at]).astype(np.uint64)
        folded = (int(word) + rank * _RANK_STRIDE) % (2 ** (8 * state.dtype.itemsize))
        state = state.copy()
        state[at] = np.array(folded, dtype=np.uint64).astype(state.dtype)
        var.assign(state)


def implements_call(model: Any) -> bool:
    """Whether ``model``'s class defines ``call()`` (Keras's base raises NotImplementedError;
    a model whose own ``train_step`` does the work needs none)."""
    return type(model).call is not keras.Model.call


def check_has_config(model: Any) -> None:
    """Raise ``NotImplementedError`` where Keras has no config of ``model``. Keras 3
    raises in ``get_config`` itself; Keras 2 logs a warning and returns an empty
    config (a subclassed model whose ``__init__`` takes objects), checked here."""
    if _K3 or getattr(model, "_is_graph_network", False):
        return
    from keras.src.utils import generic_utils  # Keras 2 (tf.keras 2.15)

    if generic_utils.is_default(model.get_config):
        keras.layers.Layer.get_config(model)  # NotImplementedError: args not serializable


def overrides_test_step(model: Any) -> bool:
    """Whether ``model``'s class defines its own ``test_step`` (which may return values
    that are not metrics)."""
    return type(model).test_step is not keras.Model.test_step


def moving_statistics(model: Any) -> list[Any]:
    """The variables ``model``'s normalization layers update as they train, outside any
    optimizer: ``BatchNormalization``'s moving mean and variance (its non-trainable
    weights; Keras 2's ``SyncBatchNormalization`` is a subclass)."""
    found: list[Any] = []
    for layer in layers_of(model):
        if isinstance(layer, keras.layers.BatchNormalization):
            found += [v for v in layer.non_trainable_weights if _is_variable(v)]
    return found


def shared_state_variables(model: Any) -> list[Any]:
    """``model``'s non-trainable numeric weights that every process must hold alike
    (moving statistics once averaged, preprocessing statistics): not its metrics'
    totals and counts, which are each process's own (Keras 2 lists a metric kept on
    a model among its weights)."""
    own = {id(v) for v in metric_variables(model)}
    for layer in layers_of(model):
        if isinstance(layer, keras.metrics.Metric):
            own.update(id(v) for v in layer.variables)
    return [v for v in model.non_trainable_weights
            if is_numeric_variable(v) and id(v) not in own]


def overrides_train_step(model: Any) -> bool:
    """Whether ``model``'s class defines its own ``train_step`` (which may build layers
    and optimizers on first use)."""
    return type(model).train_step is not keras.Model.train_step


def optimizer_built(opt: Any) -> bool:
    """Whether ``opt`` has its variables (built for the variables it trains)."""
    if _K3:
        return bool(opt.built)
    if isinstance(opt, keras.optimizers.legacy.Optimizer):
        return bool(opt.weights)
    return bool(getattr(opt, "_built", False))


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


def layers_of(model: Any) -> list[Any]:
    """The model and every layer inside it, depth first, each once."""
    return list(model._flatten_layers(include_self=True, recursive=True))


def rng_variables(model: Any) -> list[Any]:
    """The variables holding ``model``'s random state (dropout masks, custom draws).

    Each process of a run has its own: they are checkpointed per process and never
    broadcast, so dropout masks differ between shards as they do between samples.
    """
    found: list[Any] = []
    seen: set[int] = set()
    for layer in layers_of(model):
        for var in _layer_rng_variables(layer):
            if id(var) not in seen:
                seen.add(id(var))
                found.append(var)
    return found


def _layer_rng_variables(layer: Any) -> list[Any]:
    # A tf.random.Generator kept on a layer or model (a custom train_step's draws,
    # Keras 2's way; on Keras 3 keras.random.SeedGenerator is tracked below).
    own = [v.state for v in vars(layer).values() if isinstance(v, tf.random.Generator)]
    return own + _keras_rng_variables(layer)


def _keras_rng_variables(layer: Any) -> list[Any]:
    if _K3:
        return [sg.state for sg in getattr(layer, "_seed_generators", ()) if sg.state is not None]
    rg = getattr(layer, "_random_generator", None)
    if rg is None or not hasattr(rg, "_maybe_init"):
        return []
    rg._maybe_init()
    gen = getattr(rg, "_generator", None)
    return [gen.state] if isinstance(gen, tf.random.Generator) else []


# --- variables ----------------------------------------------------------------------------


def _is_variable(v: Any) -> bool:
    return isinstance(v, tf.Variable) or (_K3 and isinstance(v, keras.Variable))


def is_numeric_variable(v: Any) -> bool:
    """A variable of numbers (not a lookup layer's strings), which a sum can fingerprint."""
    if not _is_variable(v):
        return False
    dtype = tf.as_dtype(backing_variable(v).dtype)
    return dtype.is_floating or dtype.is_integer or dtype.is_bool


def model_variables(model: Any) -> list[Any]:
    """``model.weights`` that are variables.

    Keras 2 lists a lookup layer's vocabulary among the weights as a
    ``VocabWeightHandler`` (string tensors, no name, no ``assign``); checkpoints and
    broadcast handle vocabularies through :func:`lookup_layers` instead.
    """
    return [v for v in model.weights if _is_variable(v)]


def lookup_layers(model: Any) -> list[Any]:
    """The layers of ``model`` that hold a vocabulary (``StringLookup``, ``IntegerLookup``).

    Their tables are not variables on either major. A ``TextVectorization`` is
    covered by the lookup layer inside it (both expose ``get_vocabulary``; the
    inner one is the one that owns the table).
    """
    found = [layer for layer in layers_of(model)
             if hasattr(layer, "get_vocabulary") and hasattr(layer, "set_vocabulary")]
    ids = {id(layer) for layer in found}
    return [layer for layer in found
            if not any(id(inner) in ids for inner in layers_of(layer) if inner is not layer)]


def refresh_preprocessing(model: Any) -> None:
    """Recompute what preprocessing layers derive from their variables after an assign.

    ``Normalization`` computes its mean and variance tensors from its ``adapt_*``
    variables once (``finalize_state``); after a restore or a broadcast changed
    the variables, the layer must derive them again or keep normalizing with the old.
    """
    for layer in layers_of(model):
        if isinstance(layer, keras.layers.Normalization) and getattr(layer, "built", False) \
                and getattr(layer, "input_mean", None) is None \
                and getattr(layer, "adapt_mean", None) is not None:
            layer.finalize_state()


def backing_variable(var: Any) -> Any:
    """The ``tf.Variable`` behind a Keras variable (what Horovod's ops take)."""
    return var.value if _K3 and isinstance(var, keras.Variable) else var


def read_variables(variables: Sequence[Any]) -> list[Any]:
    """The current values of ``tf.Variable`` objects as tensors, in one op where TF can.

    Each value shares its variable's buffer: TensorFlow copies the buffer before
    updating the variable in place while such a tensor is alive (copy on write), so
    the values stay those of this instant. One ``_ReadVariablesOp`` (the batched read
    TensorFlow's own compilers use) costs about 50 us for 26 variables, against 12 us
    per variable read one by one (30 us with ``read_value``'s identity), and three
    times that at an epoch's end while tf.data refills its buffers. Variables on
    different devices (or a TensorFlow without the op) are read one by one.

    >>> [t.numpy().tolist() for t in read_variables([tf.Variable(1.0), tf.Variable([2, 3])])]
    [1.0, [2, 3]]
    """
    if not variables:
        return []
    from tensorflow.python.eager import context, execute

    try:
        return list(execute.execute(
            b"_ReadVariablesOp", num_outputs=len(variables),
            inputs=[v.handle for v in variables],
            attrs=("N", len(variables), "dtypes", [v.dtype.as_datatype_enum for v in variables]),
            ctx=context.context()))
    except (tf.errors.OpError, AttributeError, TypeError, ValueError):
        return [v.value() for v in variables]


def variable_name(var: Any) -> str:
    """A readable, model-unique name (Keras 3's ``path``; Keras 2's ``name``)."""
    return str(getattr(var, "path", None) or var.name)


# --- optimizers ---------------------------------------------------------------------------


def model_optimizer(model: Any) -> Any:
    """The optimizer ``model`` was compiled with, or None (uncompiled on Keras 3)."""
    return getattr(model, "optimizer", None)


def optimizer_trains_only(opt: Any, variables: Sequence[Any]) -> bool:
    """True if ``opt`` has been built, for some of ``variables`` and nothing else.

    Tells which of several wrapped optimizers hold state of one model (a GAN's
    two), so that a checkpoint of that model saves exactly theirs.
    """
    if _K3:
        if not opt.built:
            return False
        own = {id(v) for v in variables}
        return all(id(v) in own for v in opt._trainable_variables)
    built_for = getattr(opt, "_index_dict", None)  # Keras 2's (non-legacy) optimizers
    if not getattr(opt, "_built", False) or not built_for:
        return False
    return set(built_for) <= {opt._var_key(v) for v in variables}


def optimizer_variables(opt: Any, trainable: Sequence[Any]) -> list[Any]:
    """All of ``opt``'s variables, building it for ``trainable`` first if it has not run."""
    if _K3:
        if not opt.built:
            opt.build(list(trainable))
        return list(opt.variables)
    if isinstance(opt, keras.optimizers.legacy.Optimizer):
        opt._create_all_weights(list(trainable))  # idempotent
        return list(opt.variables())
    if not getattr(opt, "_built", False):
        opt.build(list(trainable))
    return list(opt.variables)


AverageFn = Callable[[list[Any]], list[Any]]


_gradient_share: Any = None


def gradient_share() -> Any:
    """This process's share in the step under way: a ``tf.Variable``, 1.0, or 0.0 at a
    step where it trains on padding only (its gradients are zeroed before they are
    averaged, so its batch, which carries no sample weights, adds nothing). Set by
    ``_callbacks.UndoPaddingMetrics``; one per process, read by every averaging
    optimizer's step. Multiplying by 1.0 leaves a gradient bit-equal."""
    global _gradient_share
    if _gradient_share is None:
        with tf.init_scope():
            _gradient_share = tf.Variable(1.0, trainable=False, name="det_gradient_share")
    return _gradient_share


def _shared(grads: list[Any]) -> list[Any]:
    share = gradient_share()

    def scale(g: Any) -> Any:
        if g is None:
            return None
        if isinstance(g, tf.IndexedSlices):
            return tf.IndexedSlices(g.values * tf.cast(share, g.values.dtype), g.indices,
                                    g.dense_shape)
        return g * tf.cast(share, g.dtype)

    return [scale(g) for g in grads]


class _AveragingMixin:
    """Averages gradients over processes where the optimizer applies them.

    Placed before the user's optimizer class, so ``fit``, a custom ``train_step``
    calling ``apply``/``apply_gradients``, several optimizers (a GAN), gradient
    clipping and loss scaling all see averaged gradients: the update is the one
    a single process would make on the global batch.
    """

    _det_average: AverageFn

    if _K3:

        def apply(self, grads: Any, trainable_variables: Any = None) -> Any:
            return super().apply(self._det_average(_shared(list(grads))), trainable_variables)

    else:

        def apply_gradients(self, grads_and_vars: Any, *args: Any, **kwargs: Any) -> Any:
            pairs = list(grads_and_vars)
            grads = self._det_average(_shared([g for g, _ in pairs]))
            return super().apply_gradients(
                list(zip(grads, [v for _, v in pairs])), *args, **kwargs)


_averaging_classes: dict[type, type] = {}


def _averaging_class(base: type) -> type:
    cls = _averaging_classes.get(base)
    if cls is None:
        # The same name as the user's class: Keras's own serialization and any
        # isinstance check of the user's code still see their optimizer.
        cls = type(base.__name__, (_AveragingMixin, base), {"__module__": base.__module__})
        _averaging_classes[base] = cls
    return cls


def averaging_optimizer(opt: Any, average: AverageFn) -> Any:
    """A new optimizer like ``opt`` (same class and config) that averages gradients.

    ``average`` takes the list of gradients (None for variables without one) and
    returns them averaged over all processes.
    """
    wrapped = _averaging_class(type(opt)).from_config(opt.get_config())
    wrapped._det_average = average
    gradient_share()  # made now, outside any traced step
    return wrapped


def average_in_place(opt: Any, average: AverageFn) -> None:
    """Make ``opt`` itself average gradients, as :func:`averaging_optimizer`'s would.

    For an optimizer a model was already compiled with (``DeterminedCallback``):
    its class becomes the averaging subclass of its own class, so the object, its
    variables and its state stay as they are. A step function traced before keeps
    the old ``apply``: make it anew.
    """
    if not isinstance(opt, _AveragingMixin):
        opt.__class__ = _averaging_class(type(opt))
    opt._det_average = average
    gradient_share()


def _wrapped_chain(opt: Any) -> Iterator[Any]:
    """``opt``, then the optimizer it wraps (a loss-scale optimizer's ``inner_optimizer``),
    and so on down."""
    while opt is not None:
        yield opt
        opt = getattr(opt, "inner_optimizer", None)


def is_averaging(opt: Any) -> bool:
    """True for an optimizer made by :func:`averaging_optimizer` (or wrapping one)."""
    return any(isinstance(o, _AveragingMixin) for o in _wrapped_chain(opt))


class _FreshBufferSwitch:
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
    again (:class:`_FreshBufferSwitch` says why not always).

    Keras 3 optimizers update through ``optimizer.assign_add``/``assign_sub``,
    which this replaces on ``opt``, and apply through ``apply``. Keras 2's call
    the variables' own methods in ``update_step``: while this optimizer traces its
    ``update_step`` (and only then, in this thread), resource variables'
    ``assign_add``/``assign_sub`` take the same form; it applies through
    ``apply_gradients``. A loss-scale optimizer's inner one is changed too; sparse
    updates, eager calls and Keras 2's legacy (fused-kernel) optimizers keep
    updating in place. A step function traced before this call keeps the old
    updates.

    >>> opt = keras.optimizers.SGD(0.1)
    >>> fresh_buffer_updates(opt), fresh_buffer_updates(opt)
    (True, False)
    >>> arm_fresh_buffers(opt)
    """
    changed = False
    for wrapped in _wrapped_chain(opt):
        if getattr(wrapped, "_det_fresh_buffers", None) is None:
            switch: _FreshBufferSwitch | None = None
            if _K3:
                switch = _FreshBufferSwitch()
                wrapped.assign_add = _fresh_buffer_update(wrapped.assign_add, tf.add, switch)
                wrapped.assign_sub = _fresh_buffer_update(wrapped.assign_sub, tf.subtract, switch)
                wrapped.apply = _disarming(wrapped.apply, switch)
            elif hasattr(wrapped, "update_step") and not isinstance(
                    wrapped, keras.optimizers.legacy.Optimizer):
                switch = _FreshBufferSwitch()
                wrapped.update_step = _with_fresh_buffer_variables(wrapped.update_step, switch)
                wrapped.apply_gradients = _disarming(wrapped.apply_gradients, switch)
            if switch is not None:
                wrapped._det_fresh_buffers = switch  # a plain object: no tracker saves it
                changed = True
    return changed


def arm_fresh_buffers(opt: Any) -> None:
    """The next step of ``opt`` (and of the optimizers it wraps) writes its dense updates
    into new buffers: a snapshot just took the current ones (:func:`fresh_buffer_updates`)."""
    for wrapped in _wrapped_chain(opt):
        switch = getattr(wrapped, "_det_fresh_buffers", None)
        if isinstance(switch, _FreshBufferSwitch):
            switch.arm()


def _disarming(apply: Callable[..., Any], switch: _FreshBufferSwitch) -> Callable[..., Any]:
    @functools.wraps(apply)
    def applied(*args: Any, **kwargs: Any) -> Any:
        result = apply(*args, **kwargs)
        switch.after_apply()
        return result

    return applied


def _fresh_buffer_update(in_place: Callable[[Any, Any], Any], op: Callable[[Any, Any], Any],
                         switch: _FreshBufferSwitch) -> Callable[[Any, Any], Any]:
    def update(variable: Any, value: Any) -> Any:
        var = backing_variable(variable)
        if (isinstance(value, tf.IndexedSlices) or not isinstance(var, tf.Variable)
                or tf.executing_eagerly()):  # eager: the sum is held, assign would copy it
            return in_place(variable, value)
        delta = tf.cast(value, var.dtype)
        switch.update(lambda: var.assign(op(var, _as_computed(delta))),
                      lambda: in_place(variable, value))
        return None

    return update


def _as_computed(delta: Any) -> Any:
    """``delta`` as computed, not merged into the update: Grappler's arithmetic
    optimizer would fold ``var + (a + b)`` into one sum of three and round it
    differently from the in-place add. ``Snapshot`` stops it and passes the
    buffer on (no copy when the update is its only reader)."""
    return tf.raw_ops.Snapshot(input=delta)


_tracing_fresh = threading.local()  # .switch: the switch of an update_step being traced here


def _with_fresh_buffer_variables(update_step: Callable[..., Any], switch: _FreshBufferSwitch
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
                return ops.assign_variable_op(resource, op(current, _as_computed(value)),
                                              name=name)

            switch.update(fresh_update, lambda: in_place(resource, value, name=name))
            return None

        return functools.wraps(in_place)(update)

    ops.assign_add_variable_op = fresh(ops.assign_add_variable_op, tf.add)
    ops.assign_sub_variable_op = fresh(ops.assign_sub_variable_op, tf.subtract)
    ops._det_fresh_buffers = True


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


# --- metrics --------------------------------------------------------------------------------


def metric_variables(model: Any) -> list[Any]:
    """The state variables of ``model``'s metrics (loss tracker and compiled metrics).

    Totals and counts, confusion-matrix cells, AUC's per-threshold counts: the
    state of every built-in metric adds up over disjoint parts of the data, so
    their sums over processes are the state of one process that saw all of it.
    """
    found: list[Any] = []
    seen: set[int] = set()
    for metric in model.metrics:
        for var in metric.variables:
            if id(var) not in seen:
                seen.add(id(var))
                found.append(var)
    return found


def metric_results(model: Any) -> dict[str, float]:
    """``model``'s metric results from their current state, by the names Keras logs."""
    out: dict[str, float] = {}
    for name, value in model.get_metrics_result().items():
        try:
            out[name] = float(value)
        except (TypeError, ValueError):
            continue  # a non-scalar result (F1 per class): not logged by det_sdk either
    return out


# --- results and callbacks ------------------------------------------------------------------


def metrics_in_order(model: Any, logs: Mapping[str, Any]) -> list[Any]:
    """``evaluate``'s list result from its dict result, in Keras's own order."""
    if _K3:
        ordered = model._flatten_metrics_in_order(dict(logs))  # a lone metric comes bare
        return list(ordered) if isinstance(ordered, (list, tuple)) else [ordered]
    names = list(model.metrics_names)
    ordered = [logs[n] for n in names if n in logs]
    return ordered + [v for k, v in logs.items() if k not in names]


def set_history_model(history: Any, model: Any) -> None:
    """``history.model = model`` (a read-only property on Keras 3)."""
    history.set_model(model)


# The attributes that hold a Keras callback's state between epochs (what its
# ``on_train_begin`` resets or its ``__init__`` sets), by class name. Keras 2 and 3
# differ: ModelCheckpoint's epoch counter (Keras 2's ``period``), TensorBoard's
# test-batch counter (Keras 3). An attribute a callback lacks is skipped.
_CALLBACK_STATE_COMMON: dict[str, tuple[str, ...]] = {
    "EarlyStopping": ("wait", "best", "stopped_epoch", "best_weights", "best_epoch"),
    "ReduceLROnPlateau": ("wait", "best", "cooldown_counter"),
    "ModelCheckpoint": ("best", "_batches_seen_since_last_saving", "_last_batch_seen"),
    "TensorBoard": ("_global_train_batch",),
}
_CALLBACK_STATE_K2 = {"ModelCheckpoint": ("epochs_since_last_save",)}
_CALLBACK_STATE_K3 = {"TensorBoard": ("_global_test_batch",)}


def callback_state_attributes() -> list[tuple[type, tuple[str, ...]]]:
    """``(Keras callback class, its state attributes)`` for the running Keras.

    >>> [cls.__name__ for cls, _ in callback_state_attributes()][:2]
    ['EarlyStopping', 'ReduceLROnPlateau']
    """
    extra = _CALLBACK_STATE_K3 if _K3 else _CALLBACK_STATE_K2
    out = []
    for name, attrs in _CALLBACK_STATE_COMMON.items():
        cls = getattr(keras.callbacks, name, None)
        if cls is not None:
            out.append((cls, attrs + extra.get(name, ())))
    return out


def learning_rate(opt: Any) -> float | None:
    """``opt``'s current learning rate (None when it is a schedule, not a value).

    Keras 2's optimizers keep it outside ``variables`` (so outside det_sdk's
    checkpoint state); what ReduceLROnPlateau set is saved with the callback.
    """
    lr = getattr(opt, "learning_rate", None) if _K3 else getattr(opt, "lr", None)
    if lr is None or (callable(lr) and not hasattr(lr, "numpy")):
        return None
    try:
        return float(lr.numpy() if hasattr(lr, "numpy") else lr)
    except (TypeError, ValueError):
        return None


def set_learning_rate(opt: Any, value: float) -> None:
    """Set ``opt``'s learning rate to ``value``, as ReduceLROnPlateau does."""
    if _K3:
        opt.learning_rate = value
    else:
        keras.backend.set_value(opt.lr, value)


# --- randomness no checkpoint holds ---------------------------------------------------------

# TensorFlow's stateful random ops with no state input: they draw from the op's own
# seed and a counter inside the kernel, which no variable (so no checkpoint) holds.
# Stateless ops (keras.random with a SeedGenerator, Keras 3 layers) and generator
# ops (tf.random.Generator: RngReadAndSkip, StatefulUniform*) are checkpointed.
UNSAVED_RANDOM_OPS = {
    "RandomStandardNormal": "tf.random.normal",
    "RandomUniform": "tf.random.uniform",
    "RandomUniformInt": "tf.random.uniform",
    "TruncatedNormal": "tf.random.truncated_normal",
    "ParameterizedTruncatedNormal": "tf.random.truncated_normal",
    "RandomShuffle": "tf.random.shuffle",
    "Multinomial": "tf.random.categorical",
    "RandomGamma": "tf.random.gamma",
    "RandomPoisson": "tf.random.poisson",
    "RandomPoissonV2": "tf.random.poisson",
}

UNSAVED_RANDOM_FIX = (
    "draw with keras.random.normal(shape, seed=self.seed_generator), "
    "self.seed_generator = keras.random.SeedGenerator(seed) made in __init__"
    if _K3 else
    "draw with a tf.random.Generator kept on the model (self.gen = "
    "tf.random.Generator.from_seed(seed) in __init__; self.gen.normal(shape))")


def _traced_functions(fn: Any, seen: set[int], depth: int = 0) -> list[Any]:
    """The ``tf.function``s behind ``fn``: itself, or found in its closure (Keras 3's
    ``train_function`` is a Python closure over its traced step functions)."""
    if fn is None or id(fn) in seen or depth > 4:
        return []
    seen.add(id(fn))
    if hasattr(fn, "_list_all_concrete_functions"):
        return [fn]
    found: list[Any] = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if callable(value):
            found += _traced_functions(value, seen, depth + 1)
    wrapped = getattr(fn, "__wrapped__", None)
    return found + _traced_functions(wrapped, seen, depth + 1)


def _random_ops_in(graph: Any, found: set[str], seen: set[int]) -> None:
    """Add the op types of :data:`UNSAVED_RANDOM_OPS` in ``graph`` and the functions it
    calls (cond and loop bodies, nested ``tf.function``s) to ``found``.

    Walks the graph's Python operations: serializing it (``as_graph_def``) to read the
    same names cost 4-7 ms per fit on the MNIST convnet, this 0.5-1 ms.
    """
    found.update(op.type for op in graph.get_operations() if op.type in UNSAVED_RANDOM_OPS)
    for fn in getattr(graph, "_functions", {}).values():
        inner = getattr(fn, "graph", None)
        if inner is not None:
            if id(inner) not in seen:
                seen.add(id(inner))
                _random_ops_in(inner, found, seen)
            continue
        fdef = getattr(fn, "definition", None)  # a function known by its FunctionDef only
        if fdef is not None:
            found.update(n.op for n in fdef.node_def if n.op in UNSAVED_RANDOM_OPS)


def unsaved_random_ops(model: Any) -> list[str]:
    """The stateful TF random ops (see :data:`UNSAVED_RANDOM_OPS`) in ``model``'s traced
    training step, nested functions included; empty if it is not traced (eager)."""
    found: set[str] = set()
    seen: set[int] = set()
    for fn in _traced_functions(getattr(model, "train_function", None), set()):
        for concrete in fn._list_all_concrete_functions():
            # a step function is also one the multi-step loop calls: walked once
            if id(concrete.graph) not in seen:
                seen.add(id(concrete.graph))
                _random_ops_in(concrete.graph, found, seen)
    return sorted(found)
