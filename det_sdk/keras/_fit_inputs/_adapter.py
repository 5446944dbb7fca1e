"""What every kind of training data answers for ``context.fit``: the adapter's interface.

One subclass per data kind (``_arrays``, ``_sequence``, ``_dataset``, ``_generator``),
as Keras splits its own input handling into one data adapter per kind. The fit asks
only these methods; which kind the data is, is decided once (``adapter_for``).

Shaping (class methods, over the data keywords before they are frozen) goes in one
order for every kind, :meth:`DataAdapter.shaped`; each kind fills in its own steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from det_sdk.distributed import Processes
from det_sdk.errors import UsageError
from det_sdk.keras._fit_inputs import _validation
from det_sdk.keras._plan import FitCall

if TYPE_CHECKING:
    from det_sdk.keras._fit_inputs._pipeline import PipelinePosition

__all__ = ["CANNOT_BUILD", "DataAdapter"]

CANNOT_BUILD = ("context.fit: cannot build the model from this input; build it first "
                "(give the first layer an input shape, or call model.build)")


@dataclass(frozen=True, eq=False)
class DataAdapter:
    """One kind of training data, shaped for this process and frozen.

    ``data``: ``model.fit``'s data keywords as this process trains on them (``x``,
    ``y``, ``sample_weight``, ``batch_size``, ``shuffle``, ``steps_per_epoch``,
    ``validation_data``, ...: those the script gave, after shaping); ``class_weight``:
    the class weights det_sdk applies in its own pipeline (taken out of ``data``).
    """

    dist: Processes
    data: Mapping[str, Any]
    class_weight: Mapping[int, float] | None = None

    # --- shaping: the same steps in the same order for every kind -------------------------

    @classmethod
    def shaped(cls, dist: Processes, data: dict[str, Any], split: float) -> DataAdapter:
        """The adapter of ``data`` (rewritten in place, then frozen): the default batch
        size, data alike on every process shared out, ``validation_split``
        (``split``, 0: none) held out, the validation data as this
        process takes it, the processes agreed on their steps (collectives), the class
        weights taken where det_sdk applies them."""
        cls._default_batch_size(dist, data)  # may refuse: before any collective
        cls._share_out(dist, data)
        if split:
            cls._split(dist, data, split)
        _validation.local_validation(dist, data)
        agreed = cls._agree(dist, data)
        class_weight = cls._take_class_weight(data)
        return cls(dist, MappingProxyType(dict(data)), class_weight, **agreed)

    @classmethod
    def _share_out(cls, dist: Processes, data: dict[str, Any]) -> None:
        """Data not passed through ``wrap_data`` that every process holds alike: share it
        out as ``wrap_data`` would, where that is well defined (numpy rows)."""

    @classmethod
    def _split(cls, dist: Processes, data: dict[str, Any], frac: float) -> None:
        """Hold out the last ``frac`` of the data as validation data (numpy only)."""
        raise UsageError("context.fit: validation_split works with numpy arrays only; pass "
                         "validation_data for a Sequence or tf.data.Dataset")

    @classmethod
    def _default_batch_size(cls, dist: Processes, data: dict[str, Any]) -> None:
        """Set the batch size Keras would use where the script gave none (numpy only)."""

    @classmethod
    def _agree(cls, dist: Processes, data: dict[str, Any]) -> dict[str, Any]:
        """What the processes agree on so that every one runs as many steps (its
        collectives): the adapter's own fields."""
        return {}

    @classmethod
    def _take_class_weight(cls, data: dict[str, Any]) -> Mapping[int, float] | None:
        """``class_weight`` where det_sdk applies it itself (its pipelines carry sample
        weights; Keras refuses both at once)."""
        return data.pop("class_weight", None)

    # --- what the fit asks -----------------------------------------------------------------

    @property
    def x(self) -> Any:
        return self.data.get("x")

    def steps_per_epoch(self) -> int | None:
        """Batches per epoch of the training data, when they can be known up front."""
        if self.data.get("steps_per_epoch"):
            return int(self.data["steps_per_epoch"])
        return self._own_steps()

    def _own_steps(self) -> int | None:
        return None

    def first_padding_step(self) -> int | None:
        """The first step of each epoch at which this process trains on padding only
        (and every later one of the epoch), or None."""
        if self.dist.size == 1:
            return None
        return self._first_padding()

    def _first_padding(self) -> int | None:
        return None

    def sample_input(self) -> Any:
        """One batch of inputs of the training data (to build an unbuilt model)."""
        raise UsageError(CANNOT_BUILD)

    def sample_batch(self) -> Any:
        """One batch of the training data as ``train_step`` receives it (to create what a
        custom ``train_step`` builds on first use)."""
        raise UsageError(CANNOT_BUILD)

    @property
    def sequence(self) -> Any:
        """The ``keras.utils.Sequence`` whose ``on_epoch_end`` Keras would call, or None."""
        return None

    def pipeline_position(self) -> PipelinePosition | None:
        """The position keeper of a pipeline whose next batch depends on how far it was
        iterated (a ``tf.data.Dataset``), or None: det_sdk's own pipelines are addressed
        by (epoch, batch)."""
        return None

    def call_inputs(self, call: FitCall, seed: int) -> dict[str, Any]:
        """What one planned ``model.fit`` call takes instead of ``data``'s keywords,
        positioned at its start (epoch, batch)."""
        return {}

    def steps_of_call(self, call_data: Mapping[str, Any]) -> int | None:
        """Steps per epoch of one call's data keywords (compared over processes)."""
        steps: int | None = call_data.get("steps_per_epoch")
        return steps

