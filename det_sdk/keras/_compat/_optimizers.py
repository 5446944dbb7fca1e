"""Optimizers across versions: their variables, whether they are built and for what,
their learning rate, and the averaging subclass that averages gradients over processes
where the optimizer applies them.

>>> opt = averaging_optimizer(keras.optimizers.SGD(0.5), average=lambda g, weight=None: g,
...                           processes=2)
>>> is_averaging(opt), type(opt).__name__
(True, 'SGD')
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from det_sdk.keras._compat._impl import impl
from det_sdk.keras._compat._share import AverageFn, gradient_share
from det_sdk.keras._compat._version import keras  # noqa: F401 - the doctest's

__all__ = [
    "OPTIMIZER_TYPES",
    "AverageFn",
    "average_in_place",
    "average_outermost",
    "averaging_optimizer",
    "gradient_share",
    "is_averaging",
    "is_loss_scale",
    "learning_rate",
    "model_optimizer",
    "optimizer_built",
    "optimizer_trains_only",
    "optimizer_variables",
    "set_learning_rate",
    "wrapped_chain",
]

#: The base classes of the running Keras's optimizers.
OPTIMIZER_TYPES: tuple[type, ...] = impl.optimizer_types()


def model_optimizer(model: Any) -> Any:
    """The optimizer ``model`` was compiled with, or None (uncompiled on Keras 3)."""
    return getattr(model, "optimizer", None)


def optimizer_built(opt: Any) -> bool:
    """Whether ``opt`` has its variables (built for the variables it trains)."""
    return bool(impl.optimizer_built(opt))


def optimizer_trains_only(opt: Any, variables: Sequence[Any]) -> bool:
    """True if ``opt`` has been built, for some of ``variables`` and nothing else.

    Tells which of several wrapped optimizers hold state of one model (a GAN's
    two), so that a checkpoint of that model saves exactly theirs.
    """
    return bool(impl.optimizer_trains_only(opt, variables))


def optimizer_variables(opt: Any, trainable: Sequence[Any]) -> list[Any]:
    """All of ``opt``'s variables, building it for ``trainable`` first if it has not run."""
    return list(impl.optimizer_variables(opt, trainable))


def learning_rate(opt: Any) -> float | None:
    """``opt``'s current learning rate (None when it is a schedule, not a value).

    Keras 2's optimizers keep it outside ``variables`` (so outside det_sdk's
    checkpoint state); what ReduceLROnPlateau set is saved with the callback.
    """
    lr = impl.learning_rate_of(opt)
    if lr is None or (callable(lr) and not hasattr(lr, "numpy")):
        return None
    try:
        return float(lr.numpy() if hasattr(lr, "numpy") else lr)
    except (TypeError, ValueError):
        return None


def set_learning_rate(opt: Any, value: float) -> None:
    """Set ``opt``'s learning rate to ``value``, as ReduceLROnPlateau does."""
    impl.set_learning_rate(opt, value)


#: Averages gradients over processes where the optimizer applies them (``apply`` on
#: Keras 3, ``apply_gradients`` on Keras 2). Placed before the user's optimizer class,
#: so ``fit``, a custom ``train_step`` calling ``apply``/``apply_gradients``, several
#: optimizers (a GAN), gradient clipping and loss scaling all see averaged gradients:
#: the update is the one a single process would make on the global batch.
_AveragingMixin: type = impl.AveragingMixin

_averaging_classes: dict[type, type[Any]] = {}



def _averaging_class(base: type) -> type[Any]:
    cls = _averaging_classes.get(base)
    if cls is None:
        # The same name as the user's class: Keras's own serialization and any
        # isinstance check of the user's code still see their optimizer.
        cls = type(base.__name__, (_AveragingMixin, base), {"__module__": base.__module__})
        _averaging_classes[base] = cls
    return cls


def _rebuild_config(opt: Any) -> dict[str, Any]:
    """``opt``'s config, for ``from_config`` to make its like: a learning-rate schedule or
    callable as the object itself. The config names it (a function by its name alone, a
    schedule class by its registered name), which ``from_config`` cannot find for one
    the script defines; the object is stateless between steps (a schedule is a function
    of the step count), so the two optimizers can share it."""
    lr = getattr(opt, "_learning_rate", None)
    if not callable(lr) or impl.is_variable(lr):
        return dict(opt.get_config())
    opt._learning_rate = 0.0  # a schedule without get_config would make get_config raise
    try:
        config = dict(opt.get_config())
    finally:
        opt._learning_rate = lr
    config["learning_rate"] = lr
    return config


def averaging_optimizer(opt: Any, average: AverageFn, processes: int) -> Any:
    """A new optimizer like ``opt`` (same class and config) that averages gradients.

    ``average`` takes the list of gradients (None for variables without one) and
    returns them averaged over all ``processes``.
    """
    wrapped = _averaging_class(type(opt)).from_config(_rebuild_config(opt))
    _set_average(wrapped, average, processes)
    return wrapped


def average_in_place(opt: Any, average: AverageFn, processes: int) -> None:
    """Make ``opt`` itself average gradients, as :func:`averaging_optimizer`'s would.

    For an optimizer a model was already compiled with (``DeterminedCallback``):
    its class becomes the averaging subclass of its own class, so the object, its
    variables and its state stay as they are. A step function traced before keeps
    the old ``apply``: make it anew.
    """
    if not isinstance(opt, _AveragingMixin):
        opt.__class__ = _averaging_class(type(opt))
    _set_average(opt, average, processes)


def _set_average(opt: Any, average: AverageFn, processes: int) -> None:
    opt._det_average = average
    opt._det_processes = processes
    # A loss-scale optimizer's loss is divided by the process count and its gradients
    # summed, so that each row's float16 gradient is one process's (_share.divided_loss)
    opt._det_divide_loss_by = processes if is_loss_scale(opt) else None
    opt._det_loss_divided = False
    gradient_share()  # made now, outside any traced step


def is_loss_scale(opt: Any) -> bool:
    """True for a loss-scale optimizer (``mixed_float16``'s), which wraps another."""
    return getattr(opt, "inner_optimizer", None) is not None


def average_outermost(opt: Any) -> bool:
    """Make the outermost optimizer of ``opt``'s chain the one that averages.

    Under ``mixed_float16`` Keras's ``compile`` wraps the optimizer it is given (the
    averaging one ``wrap_optimizer`` made) in a loss-scale optimizer, which decides per
    process whether a step's gradients are finite before its inner optimizer averages
    them: one process could skip the step (and the averaging collective) while the
    others wait in it. Averaged first, every process sees the same gradients and takes
    the same decision, the one a single process takes on the global batch. The inner
    averaging optimizers then apply what they are given. Returns True if anything
    changed (a step function traced before still averages inside: make it anew).
    """
    def averages(o: Any) -> bool:  # (isinstance: Keras 2's wrappers delegate attributes)
        return isinstance(o, _AveragingMixin) and getattr(o, "_det_average", None) is not None

    inner = [o for o in list(wrapped_chain(opt))[1:] if averages(o)]
    if not inner:
        return False
    if not averages(opt):
        average_in_place(opt, inner[0]._det_average, inner[0]._det_processes)
    for o in inner:
        o._det_average = None  # averaged once, by the outermost
    return True


def wrapped_chain(opt: Any) -> Iterator[Any]:
    """``opt``, then the optimizer it wraps (a loss-scale optimizer's ``inner_optimizer``),
    and so on down."""
    while opt is not None:
        yield opt
        opt = getattr(opt, "inner_optimizer", None)


def is_averaging(opt: Any) -> bool:
    """True for an optimizer made by :func:`averaging_optimizer` (or wrapping one)."""
    return any(isinstance(o, _AveragingMixin) for o in wrapped_chain(opt))
