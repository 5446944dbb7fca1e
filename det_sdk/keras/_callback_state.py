"""The user's callbacks' state in det_sdk's checkpoints, so a resumed ``fit`` goes on as one.

What is saved, at every checkpoint, in ``metadata.json`` under ``"callbacks"``::

    {"version": 1, "states": {"EarlyStopping[0]": {...}, "CSVLogger[0]": {...}}}

A callback is named by its class name and its position among the ``fit``'s
callbacks of the same class (``"EarlyStopping[1]"`` is the second
EarlyStopping), counted over the whole list the script passes, so every process
names it alike. A resumed run restores each state into the callback of the same
name; a callback without a saved state (a checkpoint written before this, or a
callback the script added since) starts afresh.

Whose state:

- a callback with ``get_state()`` and ``set_state(state)`` (the user's opt-in):
  what ``get_state()`` returns;
- Keras's ``EarlyStopping``, ``ModelCheckpoint``, ``ReduceLROnPlateau``,
  ``TensorBoard`` (and subclasses): their counters and best values (the
  attributes are listed in ``_compat.callback_state_attributes``);
- ``CSVLogger``: how many bytes its file held; a resumed run cuts the file back to
  them (rows of epochs after the checkpoint go) and appends, with no second header.

A state may hold ``None``, ``bool``, ``int``, ``float`` (``inf`` and ``nan``
too), ``str``, lists and tuples (they come back as lists), dicts with ``str``
keys, numpy arrays and numpy scalars (they come back as numpy arrays), nested
as deep as needed. Anything else is refused with an error naming the callback.

The same state also carries over between the ``model.fit`` calls one
``context.fit`` makes (Keras's callbacks reset themselves at each
``on_train_begin``), so ``context.fit`` behaves as one ``model.fit`` call.

>>> decode(encode({"best": float("inf"), "w": [1, 2]}, "cb"))["best"]
inf
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from det_sdk.errors import UsageError
from det_sdk.keras import _compat
from det_sdk.keras._callback_codec import (
    METADATA_KEY,
    STATE_VERSION,
    CallbackStateError,
    StateKeeper,
    callback_names,
    decode,
    encode,
)

log = logging.getLogger("det_sdk.keras")

__all__ = [
    "METADATA_KEY",
    "STATE_VERSION",
    "CallbackStateError",
    "CallbackStates",
    "callback_names",
    "decode",
    "encode",
    "keep_files_with_trial",
    "saved_state",
]

def _user_opted_in(cb: Any) -> bool:
    return callable(getattr(cb, "get_state", None)) and callable(getattr(cb, "set_state", None))


def _keras_attributes(cb: Any) -> tuple[str, ...] | None:
    for cls, attrs in _compat.callback_state_attributes():
        if isinstance(cb, cls):
            return attrs
    return None


def _csv_logger() -> type | None:
    return getattr(_compat.keras.callbacks, "CSVLogger", None)


def _is_csv_logger(cb: Any) -> bool:
    cls = _csv_logger()
    return cls is not None and isinstance(cb, cls)


def _state_of(cb: Any) -> dict[str, Any] | None:
    if _user_opted_in(cb):
        return {"get_state": cb.get_state()}
    state: dict[str, Any] = {}
    if _is_csv_logger(cb):
        path = os.fspath(cb.filename)
        if cb.csv_file is not None and not getattr(cb.csv_file, "closed", False):
            cb.csv_file.flush()  # Keras flushes each row already; a subclass may not
        state["csv_bytes"] = os.path.getsize(path) if os.path.isfile(path) else 0
    attrs = _keras_attributes(cb)
    for attr in attrs or ():
        if hasattr(cb, attr):
            state[attr] = getattr(cb, attr)
    if _is_reduce_lr(cb) and getattr(cb, "model", None) is not None:
        # what it set; Keras 2's checkpointed optimizer state does not hold the rate
        lr = _compat.learning_rate(_compat.model_optimizer(cb.model))
        if lr is not None:
            state["learning_rate"] = lr
    return state or None


def _is_reduce_lr(cb: Any) -> bool:
    cls = getattr(_compat.keras.callbacks, "ReduceLROnPlateau", None)
    return cls is not None and isinstance(cb, cls)


def _set_state(cb: Any, state: Mapping[str, Any]) -> None:
    if "get_state" in state:
        if _user_opted_in(cb):
            cb.set_state(state["get_state"])
        return
    for attr, value in state.items():
        if attr == "csv_bytes":
            continue
        if attr == "learning_rate":
            opt = _compat.model_optimizer(cb.model) if cb.model is not None else None
            if opt is not None:
                _compat.set_learning_rate(opt, value)
            continue
        if attr == "best_weights" and value is not None:
            value = list(value)
        setattr(cb, attr, value)


def _resume_csv(cb: Any, nbytes: int) -> None:
    """Cut ``cb``'s file back to ``nbytes`` and have it append (no second header)."""
    path = os.fspath(cb.filename)
    if os.path.isfile(path) and os.path.getsize(path) > nbytes:
        with open(path, "r+b") as f:
            f.truncate(nbytes)
    cb.append = True


class CallbackStates(StateKeeper, _compat.keras.callbacks.Callback):
    """Save the user's callbacks' state, restore it on resume and between ``model.fit`` calls.

    Placed twice in the callback list: once before the user's callbacks
    (``phase="before"``: a CSVLogger appends to its file instead of starting it
    anew), once after them (``phase="after"``: what their ``on_train_begin`` reset
    is put back, and their state at each ``on_train_end`` is kept for the next
    call: :class:`~det_sdk.keras._callback_codec.StateKeeper`). :meth:`collect` gives
    the state a checkpoint saves.

    ``every`` is the whole list the script passed (names are counted over it);
    ``running`` those this process runs (file writers run on rank 0 only).

    >>> states = CallbackStates([], [])
    >>> states.collect()
    {'version': 1, 'states': {}}
    """

    def __init__(self, every: Sequence[Any], running: Sequence[Any]) -> None:
        super().__init__()
        _refuse_inexact(every)
        ids = {id(cb) for cb in running}
        self.keep([(name, cb) for name, cb in zip(callback_names(every), every)
                   if id(cb) in ids])

    def state_of(self, cb: Any) -> dict[str, Any] | None:
        return _state_of(cb)

    def set_state(self, cb: Any, state: Mapping[str, Any]) -> None:
        _set_state(cb, state)

    def before_user(self) -> _compat.keras.callbacks.Callback:
        """The callback that runs before the user's (see the class docstring)."""
        return _BeforeUser(self)

    def _prepare_files(self) -> None:
        for name, cb in self._named:
            if not _is_csv_logger(cb):
                continue
            if name in self._csv_cut:
                _resume_csv(cb, self._csv_cut.pop(name))
            elif self._started:
                cb.append = True  # a later model.fit call of the same fit continues the file


def _refuse_inexact(callbacks: Sequence[Any]) -> None:
    """Refuse a callback whose effect no checkpoint can carry across a resume."""
    for name, cb in zip(callback_names(callbacks), callbacks):
        if _compat.swaps_averages_in_between_epochs(cb):
            raise UsageError(
                f"context.fit: callbacks {name}, SwapEMAWeights(swap_on_epoch=True), cannot "
                "resume exactly: between epochs the model holds the optimizer's moving "
                "averages and the optimizer the weights (a checkpoint there saves them "
                "swapped), and at the last epoch of each model.fit call (context.fit makes "
                "several: a resume, a mid-epoch validation) it keeps the averages as the "
                "weights for good. Pass SwapEMAWeights() (swap_on_epoch=False: validation on the "
                "averages); the fit ends with the weights overwritten by the averages "
                "anyway (use_ema=True)")


class _BeforeUser(_compat.keras.callbacks.Callback):
    def __init__(self, states: CallbackStates) -> None:
        super().__init__()
        self.states = states

    def on_train_begin(self, logs: Any = None) -> None:
        self.states._prepare_files()


def saved_state(checkpoint_dir: Any) -> Any:
    """The ``"callbacks"`` entry of the checkpoint in ``checkpoint_dir`` (None if it has none)."""
    from det_sdk.keras import _checkpoint

    return _checkpoint.read_metadata(checkpoint_dir).get(METADATA_KEY)


# The attribute that names the file each file-writing Keras callback writes (the same on
# Keras 2 and 3).
_FILE_ATTRIBUTES = (("ModelCheckpoint", "filepath"), ("CSVLogger", "filename"))


def _link_from_working_directory(relative: str, files_dir: Path) -> None:
    """Make ``relative`` (from the working directory) lead to ``files_dir / relative``:
    a symbolic link at its first component, unless something is there already (a
    folder of the uploaded model directory: then the script's path there is its own)."""
    first = Path(relative).parts[0]
    if first in (".", ".."):
        return
    link = Path(first)
    if link.is_symlink() or link.exists():
        return
    target = files_dir / first
    if len(Path(relative).parts) > 1:
        target.mkdir(parents=True, exist_ok=True)
    try:
        link.symlink_to(target, target_is_directory=len(Path(relative).parts) > 1)
    except FileExistsError:
        pass  # another rank of the trial made it: the same link
    except OSError as err:  # a file system without links: the absolute path still works
        log.warning("det_sdk: cannot link %s to %s: %s", link, target, err)


def keep_files_with_trial(callbacks: Sequence[Any], files_dir: Path | None,
                          announce: bool = True) -> dict[str, str]:
    """Resolve the relative file paths of ``callbacks`` under ``files_dir``, reachable
    by their relative paths too.

    On the cluster the trial's working directory is deleted when the trial ends;
    ``files_dir`` (``<host_path>/trial_files/<experiment>/trial_<id>``) stays. A
    ModelCheckpoint's ``filepath`` and a CSVLogger's ``filename`` that are relative
    are made ``files_dir / path`` (absolute ones are left as the script gave them),
    and one line on stderr says where they went. The relative path keeps working for
    the script (``load_model("best_model.h5")`` after the fit): its first component
    in the working directory is a link to the kept one. Returns ``{callback name:
    new path}``.
    With ``files_dir`` None (a local run) nothing changes.

    >>> keep_files_with_trial([object()], Path("/tmp/x"))
    {}
    """
    if files_dir is None:
        return {}
    moved: dict[str, str] = {}
    classes = [(getattr(_compat.keras.callbacks, c, None), a) for c, a in _FILE_ATTRIBUTES]
    for name, cb in zip(callback_names(callbacks), callbacks):
        for cls, attr in classes:
            if cls is None or not isinstance(cb, cls):
                continue
            path = os.fspath(getattr(cb, attr))
            if os.path.isabs(path):
                continue
            new = os.path.join(os.fspath(files_dir), path)
            os.makedirs(os.path.dirname(new), exist_ok=True)
            setattr(cb, attr, new)
            moved[name] = new
            _link_from_working_directory(path, Path(files_dir))
    if moved and announce:
        where = "; ".join(f"{name} -> {path}" for name, path in moved.items())
        print("det_sdk: the callbacks' files are kept with the trial (its working directory "
              f"is deleted when it ends): {where}", file=sys.stderr, flush=True)
    return moved
