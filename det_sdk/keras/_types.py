"""The type-hint names of Determined's ``determined.keras`` (``from determined.keras import
InputData``), so that scripts written for it import under ``det_sdk.keras`` unchanged.

>>> import numpy as np
>>> from det_sdk.keras import ArrayLike, InputData
>>> def size(x: ArrayLike) -> int:
...     return len(x)
>>> size(np.zeros(3))
3
"""

from __future__ import annotations

from typing import Union

import numpy as np
import tensorflow as tf

from det_sdk.keras import _compat
from det_sdk.keras._trial import SequenceAdapter

__all__ = ["ArrayLike", "InputData"]

#: Arrays as ``model.fit`` takes them: one array, a list, or a dict by input name.
ArrayLike = Union[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]  # noqa: UP007

#: What a TFKerasTrial's ``build_training_data_loader`` / ``build_validation_data_loader``
#: returns: a ``keras.utils.Sequence`` (``PyDataset`` on Keras 3), a ``tf.data.Dataset``,
#: a :class:`SequenceAdapter`, or an ``(x, y[, sample_weight])`` tuple of arrays.
InputData = Union[_compat.SequenceBase, tf.data.Dataset, SequenceAdapter, tuple]  # noqa: UP007
