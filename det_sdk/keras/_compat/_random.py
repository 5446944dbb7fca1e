"""Random state: seeds every process alike, each rank's own random state in layers, the
variables that hold it, and the random ops no checkpoint holds.

>>> set_seeds(7)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from det_sdk.keras._compat._impl import impl
from det_sdk.keras._compat._model import layers_of
from det_sdk.keras._compat._version import keras

__all__ = [
    "UNSAVED_RANDOM_FIX",
    "UNSAVED_RANDOM_OPS",
    "distinct_random_state",
    "rng_variables",
    "set_seeds",
    "unsaved_random_ops",
]


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
    impl.random_generator_layers()


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
    return own + list(impl.keras_rng_variables(layer))


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

#: How to draw the same numbers from state a checkpoint holds, on the running Keras.
UNSAVED_RANDOM_FIX: str = impl.UNSAVED_RANDOM_FIX


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
