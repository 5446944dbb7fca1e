"""The end of Keras's ``fit``: ``optimizer.finalize_variable_values``, done once per training.

Keras's ``fit`` (Keras 3, and Keras 2's non-legacy optimizers) ends by calling
``model.optimizer.finalize_variable_values(model.trainable_weights)``: an optimizer
built with ``use_ema=True`` overwrites the model's weights by their moving averages
there. ``context.fit`` trains in several ``model.fit`` calls where one plain fit runs
one (a resume in mid-epoch, a validation in mid-epoch, the searcher's lengths), so
each call's end would overwrite the weights and training would go on from the
averages: a resumed run would end elsewhere than an uninterrupted one. A
:class:`FinalizeOnce` holds that step back in every call but the one that ends the
training (or does it after the last call, where only the searcher knew it was the
last), so the weights are overwritten once, where one ``model.fit`` would.

An optimizer without ``use_ema`` (anywhere down a loss-scale wrapper's chain)
finalizes nothing and is left untouched.

>>> opt = keras.optimizers.SGD(0.1, use_ema=True)
>>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
>>> model.compile(opt, "mse"); opt.build(model.trainable_variables)
>>> with FinalizeOnce(model) as once:
...     model.optimizer.finalize_variable_values(model.trainable_weights)  # held back
...     (once.done, once.finish())
(False, True)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from det_sdk.keras._compat._optimizers import model_optimizer, wrapped_chain
from det_sdk.keras._compat._version import keras  # noqa: F401 - the doctest's

__all__ = ["FinalizeOnce", "overwrites_weights"]

_NAME = "finalize_variable_values"


def overwrites_weights(opt: Any) -> bool:
    """Whether ``opt`` (or an optimizer it wraps) overwrites the model's weights when a
    fit ends: ``use_ema=True``."""
    return any(bool(getattr(o, "use_ema", False)) for o in wrapped_chain(opt))


class FinalizeOnce:
    """Within ``with``: ``model``'s optimizer finalizes only when :meth:`ends_training_when`'s
    predicate says the ``model.fit`` call ending now ends the training, and at most once;
    :meth:`finish` finalizes after the last call if none did. Nothing changes for an
    optimizer that finalizes nothing.
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        opt = model_optimizer(model)
        self.optimizer = opt if opt is not None and overwrites_weights(opt) else None
        self.done = False  # the weights were overwritten by their averages
        self._ends: Callable[[], bool] = lambda: False
        self._real: Callable[[Any], Any] | None = None
        self._own: Any = None  # an instance attribute of that name the user had set

    def __enter__(self) -> FinalizeOnce:
        opt = self.optimizer
        if opt is not None:
            self._own = vars(opt).get(_NAME)
            self._real = getattr(opt, _NAME)
            setattr(opt, _NAME, self._held)
        return self

    def __exit__(self, *exc: object) -> None:
        opt = self.optimizer
        if opt is None:
            return
        if self._own is not None:
            setattr(opt, _NAME, self._own)
        else:
            delattr(opt, _NAME)

    def ends_training_when(self, predicate: Callable[[], bool]) -> None:
        """For the next ``model.fit`` call: ``predicate()``, asked as it ends, tells whether
        that call ends the training (then it finalizes, where Keras does: before the
        callbacks' ``on_train_end``)."""
        self._ends = predicate

    def _held(self, var_list: Any) -> None:
        if self._ends():
            self._finalize(var_list)

    def _finalize(self, var_list: Any) -> None:
        if not self.done and self._real is not None:
            self._real(var_list)
            self.done = True

    def finish(self) -> bool:
        """Training ended: finalize now if no call did. True if the weights were
        overwritten (a checkpoint of this position taken before holds the others)."""
        if self.optimizer is not None:
            self._finalize(self.model.trainable_weights)
        return self.done
