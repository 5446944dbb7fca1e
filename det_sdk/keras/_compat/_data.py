"""Data and predictions across versions: the base class of a Keras ``Sequence``, and
predicting batch by batch as ``model.predict`` would.

>>> issubclass(keras.utils.Sequence, SequenceBase)
True
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np  # noqa: F401 - the doctest's

from det_sdk.keras._compat._impl import impl
from det_sdk.keras._compat._version import keras

__all__ = ["SequenceBase", "predict_batches", "unread_iterators_between_passes"]

#: The base class of ``keras.utils.Sequence`` (``PyDataset`` on Keras 3).
SequenceBase = keras.utils.Sequence


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
    yield from impl.predict_batches(model, batches)


def unread_iterators_between_passes(steps_given: bool) -> int:
    """How many ``iter(dataset)`` calls ``model.fit`` makes between two passes over a
    ``tf.data`` dataset besides the iterator it reads next (each draws seeds from the
    dataset's shuffle seed generator). ``steps_given``: ``steps_per_epoch`` was passed.

    >>> unread_iterators_between_passes(True)
    0
    """
    n: int = impl.unread_iterators_between_passes(steps_given)
    return n
