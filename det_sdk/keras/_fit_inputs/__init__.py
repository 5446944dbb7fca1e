"""The data of one ``context.fit``, shaped once and frozen: :class:`FitInputs`.

:func:`fit_inputs` takes ``model.fit``'s data keywords out of the fit's arguments and
chooses ONE adapter for the kind of training data (:func:`adapter_for`, the one place
that asks which kind it is), as Keras splits its own input handling into one data
adapter per kind:

* numpy arrays, lists/dicts of them, ``wrap_data``'s views: ``_arrays.ArrayAdapter``
* a ``keras.utils.Sequence`` / ``PyDataset``: ``_sequence.KerasSequenceAdapter``
* a ``tf.data.Dataset``: ``_dataset.TFDatasetAdapter``
* a generator, an iterator, anything else: ``_generator.GeneratorAdapter`` (no ``x``:
  ``NoData``)

The adapter answers what the fit asks of the data: steps per epoch, where padding
starts, a sample input and batch, and each planned call's keywords; the validation
data (whatever its own kind) is a :class:`Validation`.

>>> import numpy as np
>>> from det_sdk.distributed import SingleProcess
>>> kwargs = {"x": np.zeros((10, 1)), "y": np.zeros((10, 1)), "epochs": 2,
...           "validation_split": 0.2}
>>> inputs = fit_inputs(SingleProcess(), kwargs)
>>> kwargs, type(inputs.train).__name__, inputs.steps_per_epoch()
({'epochs': 2}, 'ArrayAdapter', 1)
>>> inputs.validation.parts[0].shape
(2, 1)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from det_sdk.distributed import Processes
from det_sdk.errors import UsageError
from det_sdk.keras import _compat, _data
from det_sdk.keras._fit_inputs._adapter import DataAdapter
from det_sdk.keras._fit_inputs._arrays import ArrayAdapter
from det_sdk.keras._fit_inputs._dataset import TFDatasetAdapter
from det_sdk.keras._fit_inputs._generator import GeneratorAdapter, NoData
from det_sdk.keras._fit_inputs._pipeline import PipelinePosition
from det_sdk.keras._fit_inputs._sequence import KerasSequenceAdapter
from det_sdk.keras._fit_inputs._validation import (
    Validation,
    fold_validation_data,
    split_fraction,
)
from det_sdk.keras._plan import FitCall

__all__ = ["DATA_KEYS", "DataAdapter", "FitInputs", "PipelinePosition", "Validation", "adapter_for",
           "fit_inputs"]

# model.fit's keywords about the data (and the proposal's x_val/y_val): FitInputs owns
# them; the fit's other keywords (epochs, callbacks, verbose, ...) stay the fit's.
DATA_KEYS = ("x", "y", "sample_weight", "batch_size", "shuffle", "steps_per_epoch",
             "class_weight", "validation_data", "validation_batch_size", "validation_split",
             "x_val", "y_val")


def adapter_for(x: Any) -> type[DataAdapter]:
    """The adapter of training data ``x``'s kind.

    >>> import numpy as np
    >>> adapter_for({"a": np.zeros(2)}).__name__, adapter_for(iter([])).__name__
    ('ArrayAdapter', 'GeneratorAdapter')
    """
    if _data.is_array_data(x):
        return ArrayAdapter
    if isinstance(x, _compat.SequenceBase):
        return KerasSequenceAdapter
    if isinstance(x, tf.data.Dataset):
        return TFDatasetAdapter
    if x is None:
        return NoData
    return GeneratorAdapter


@dataclass(frozen=True, eq=False)
class FitInputs:
    """The data of one fit as this process trains on it: ``train``, the adapter of its
    kind; ``validation``, None without validation data; ``first_padding``, the first
    step of each epoch at which this process trains on padding only (its metric
    updates are undone), or None."""

    train: DataAdapter
    validation: Validation | None
    first_padding: int | None
    #: where a ``tf.data`` training pipeline is (None: det_sdk's own pipelines, addressed
    #: by (epoch, batch), or a generator Keras reads)
    pipeline: PipelinePosition | None = None

    def steps_per_epoch(self) -> int | None:
        """Batches per epoch of the training data, when they can be known up front."""
        return self.train.steps_per_epoch()

    def sample_input(self) -> Any:
        """One batch of inputs (to build an unbuilt model)."""
        return self.train.sample_input()

    def sample_batch(self) -> Any:
        """One batch as ``train_step`` receives it."""
        return self.train.sample_batch()

    @property
    def sequence(self) -> Any:
        """The Sequence whose ``on_epoch_end`` det_sdk calls (Keras does not), or None."""
        return self.train.sequence

    def validation_rows(self) -> Callable[[int], float] | None:
        """Rows of each validation batch ``fit`` makes; None when unknown or none."""
        return self.validation.rows() if self.validation is not None else None

    def call_inputs(self, call: FitCall, seed: int) -> dict[str, Any]:
        """The data keywords of one planned ``model.fit`` call, positioned at its start.

        Numpy arrays and Sequences become ``tf.data`` pipelines addressed by (epoch,
        batch) whose order depends on ``seed`` and the epoch alone; a Dataset goes as
        it is (``pipeline`` puts back where it was). Every process must run as many
        steps, or Horovod hangs: checked here (a collective), before the call.
        """
        data = {**self.train.data, "validation_freq": call.validate_epochs,
                **self.train.call_inputs(call, seed)}
        self._check_same_steps(data)
        return data

    def _check_same_steps(self, call_data: dict[str, Any]) -> None:
        dist = self.train.dist
        if dist.size == 1:
            return
        every = dist.allgather(self.train.steps_of_call(call_data))
        if len(set(every)) > 1:
            raise UsageError(
                "context.fit: the processes would run different numbers of steps per epoch "
                f"({', '.join(f'rank {r}: {s}' for r, s in enumerate(every))}); Horovod needs "
                "the same on all. Pass the same steps_per_epoch on every process (or none: "
                "det_sdk then pads the shorter data to the longest)."
            )


def fit_inputs(dist: Processes, kwargs: dict[str, Any]) -> FitInputs:
    """Take the data keywords (``DATA_KEYS``) out of ``kwargs`` and shape them once: the
    validation data folded in and split off, Keras's default batch size, the validation
    data as this process takes it, every process's steps agreed (collectives), the
    class weights where det_sdk applies them."""
    data = {k: kwargs.pop(k) for k in DATA_KEYS if k in kwargs}
    fold_validation_data(data)
    frac = split_fraction(data)
    train = adapter_for(data.get("x")).shaped(dist, data, frac)
    val = train.data.get("validation_data")
    validation = None if val is None else Validation(
        val, train.data.get("validation_batch_size") or train.data.get("batch_size"))
    return FitInputs(train, validation, train.first_padding_step(), train.pipeline_position())
