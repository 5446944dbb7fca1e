"""Where a ``tf.data`` training pipeline is, kept across ``model.fit`` calls, stops and
resumes: :class:`PipelinePosition`.

A pipeline's next batch depends on how far it was iterated, not on (epoch, batch)
alone: ``repeat().shuffle(n)`` mixes epochs in its buffer, and a ``shuffle`` draws new
seeds for every pass from a generator the dataset keeps. Skipping ``batch`` batches of
a fresh iterator replays batches already trained (measured: Horovod's Keras MNIST
example resumed 0.0375 away from the uninterrupted run). So det_sdk keeps the
*iterator's* state, as tf.data saves it (shuffle buffers, prefetched elements and the
dataset's seed generator included), and puts it into the iterator Keras reads:

- the first step of each ``model.fit`` call restores where the previous call (or the
  checkpoint) left the pipeline: a call that continues an epoch, or an epoch Keras
  would take from the same iterator (``steps_per_epoch`` given and the pass not over),
  continues it; an epoch Keras would start on a new iterator starts a new pass from
  the restored seed generator, as Keras's own ``iter(dataset)`` would have. The same
  path runs between a run's own calls and across a resume, so both train the same
  batches;
- each checkpoint holds every process's pipeline state (``pipeline:<rank>`` arrays)
  and the batches taken from the current pass.

A pipeline tf.data cannot save (``from_generator``: a Python generator) is replayed
instead: a resume skips the batches of the current pass on a fresh iterator, exact
only if the generator yields the same batches every time; one with Python functions
inside (``py_function``, ``numpy_function``) or stateful random ops in a ``map`` is
saved without their state, exact if they are pure. The first checkpoint says so once,
naming the pipeline and what to change.

>>> import tensorflow as tf
>>> ds = tf.data.Dataset.range(8).repeat().shuffle(4, seed=1).batch(2)
>>> p = PipelinePosition(ds, steps_given=True)
>>> it = iter(ds); _ = next(it); state = save_iterator(it)[0]
>>> again = iter(ds); restore_iterator(again, state); bool((next(again) == next(it)).numpy().all())
True
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from det_sdk.keras import _compat

__all__ = ["PipelinePosition", "UnsavedPipeline", "restore_iterator", "save_iterator"]

log = logging.getLogger("det_sdk.keras")

_FAIL, _IGNORE = 2, 1  # tf.data's ExternalStatePolicy values (SerializeIterator's argument)
_CHUNK = 256  # state elements per serialized proto

FIX = ("for an exact resume build the pipeline from tf.data's own ops (from_tensor_slices, "
       "TFRecordDataset, map with TensorFlow ops, keras.random / tf.random.Generator for "
       "noise) instead of from_generator, py_function or numpy_function")


def save_iterator(it: Any) -> tuple[bytes | None, str | None]:
    """``it``'s state as bytes, and why it is not exact (None: exact).

    (None, why): tf.data cannot save it at all (``from_generator``)."""
    why = None
    try:
        variant = _serialize(it, _FAIL)
    except tf.errors.FailedPreconditionError as err:  # a stateful function inside
        why = _first_line(err)
        try:
            variant = _serialize(it, _IGNORE)
        except tf.errors.OpError as err2:
            return None, _first_line(err2)
    except tf.errors.OpError as err:  # UnimplementedError: GeneratorDataset
        return None, _first_line(err)
    # in chunks of elements (a shuffle buffer's are one each): one proto per element is
    # 3x slower (34 MB of MNIST images: 1.4 s against 0.5 s), one for all can pass
    # protobuf's 2 GB limit
    n = int(variant.shape[0])
    parts = [tf.io.serialize_tensor(variant[i:i + _CHUNK]).numpy() for i in range(0, n, _CHUNK)]
    return b"".join(struct.pack("<Q", len(p)) + p for p in parts), why


def restore_iterator(it: Any, state: bytes) -> None:
    """Put ``state`` (from :func:`save_iterator`) into ``it``, an iterator of the same
    pipeline; the dataset's seed generator is restored with it."""
    parts, at = [], 0
    while at < len(state):
        (n,) = struct.unpack_from("<Q", state, at)
        parts += tf.unstack(tf.io.parse_tensor(state[at + 8:at + 8 + n], tf.variant))
        at += 8 + n
    # stacked, as concat has no kernel for variants
    tf.raw_ops.DeserializeIterator(resource_handle=it._iterator_resource,
                                   serialized=tf.stack(parts))


def _serialize(it: Any, policy: int) -> Any:
    # the iterator's resource: OwnedIterator's (TF 2.15 to 2.21); its own _save() takes
    # the policy from the dataset's options and base64-encodes the state
    return tf.raw_ops.SerializeIterator(resource_handle=it._iterator_resource,
                                        external_state_policy=policy)


def _first_line(err: Exception) -> str:
    msg = getattr(err, "message", str(err))
    text = msg.split("\n")[0]
    if "}}" in text:  # "{{function_node ...}} GeneratorDataset does not ..."
        text = text.split("}}", 1)[1]
    return text.split(" [Op:")[0].strip()


@dataclass
class _Left:
    """Where the last call (or a checkpoint) left the pipeline: the state of the
    iterator in use (None: not saveable) and of that iterator as its pass began (before
    its first batch), that iterator itself within the process (None after a resume),
    and the batches taken from its pass."""

    state: bytes | None
    pass_state: bytes | None
    iterator: Any
    pass_batches: int
    why: str | None = None
    saved: bool = True  # False: ``state`` is still to take from ``iterator``

    def take_state(self) -> None:
        """Serialize the iterator's state now, if not yet (only when it is needed: a next
        call or a checkpoint; saving a large shuffle buffer takes a while)."""
        if not self.saved:
            self.state, self.why = save_iterator(self.iterator)
            self.saved = True


class PipelinePosition:
    """The position of one fit's ``tf.data`` training pipeline (see the module).

    ``steps_given``: the script passed ``steps_per_epoch`` (Keras then takes each epoch
    from the same iterator while the pass lasts); ``name``: how messages name it.

    Two states are kept: the iterator's now (to continue its pass) and as its pass
    began. A new pass's seeds are drawn after restoring the second, then making the
    iterators Keras makes between passes (``_compat.unread_iterators_between_passes``):
    an iterator whose shuffle has emitted its whole pass saves the generator one draw
    on (TF 2.15 and 2.21, measured), so restoring it would give the next pass the order
    of the pass after it.
    """

    def __init__(self, dataset: Any, *, steps_given: bool, name: str = "x") -> None:
        self.steps_given = steps_given
        self.name = name
        n = int(dataset.cardinality())
        self.cardinality = n if n >= 0 else None  # None: infinite or unknown
        self._left: _Left | None = None
        self._in_use: Any = None  # the iterator training reads now
        self._pass_state: bytes | None = None  # its state as its pass began
        self._keras: Any = None  # the iterator Keras handed the step function last
        self._pass_start = 0  # steps completed when the current pass began
        self._restored = False  # a mid-pass restore moved the seed generator on
        self._warned = False

    # --- a model.fit call ----------------------------------------------------------------

    @contextmanager
    def feeding(self, model: Any, steps_done: Callable[[], int], mid_epoch: bool
                ) -> Iterator[None]:
        """One ``model.fit`` call reads the pipeline from where it was left.

        ``steps_done``: the fit's batches so far; ``mid_epoch``: the call continues an
        epoch. The step function is wrapped for the call (and unwrapped after): it is
        where Keras hands over its iterator."""
        model.make_train_function()
        step = model.train_function
        first = True

        def train_function(keras_iterator: Any) -> Any:
            nonlocal first
            if keras_iterator is not self._keras:
                self._keras = keras_iterator
                if first:
                    self._start_call(keras_iterator, steps_done(), mid_epoch)
                else:  # Keras made a new iterator: a new pass, as in any run
                    self._new_pass(keras_iterator, steps_done())
                first = False
            return step(self._in_use)

        model.train_function = train_function
        try:
            yield
        finally:
            model.train_function = step
            if self._in_use is not None:
                self._left = _Left(None, self._pass_state, self._in_use,
                                   steps_done() - self._pass_start, saved=False)
            self._keras = self._in_use = None

    def _new_pass(self, keras_iterator: Any, steps: int) -> None:
        """A pass begins on ``keras_iterator`` (Keras's new one), seeded as the
        uninterrupted run seeds it."""
        it = keras_iterator
        if self._restored and self._pass_state is not None:
            restore_iterator(it, self._pass_state)  # the generator as the last pass began
            dataset = keras_iterator._dataset
            for _ in range(_compat.unread_iterators_between_passes(self.steps_given)):
                iter(dataset)  # those Keras makes between passes, each drawing seeds
            it = iter(dataset)
        self._restored = False
        self._in_use, self._pass_start = it, steps
        self._pass_state = save_iterator(it)[0]

    def _start_call(self, keras_iterator: Any, steps: int, mid_epoch: bool) -> None:
        """The iterator the call's first step reads: Keras's own, put where the pipeline
        was left."""
        left = self._left
        if left is None:  # the run's first call: Keras's fresh iterator as it is
            self._new_pass(keras_iterator, steps)
            return
        same_pass = mid_epoch or (self.steps_given and (
            self.cardinality is None or left.pass_batches < self.cardinality))
        if same_pass:
            left.take_state()
        if not same_pass:
            if left.pass_state is not None:  # the next pass's seeds, as Keras draws them
                self._pass_state, self._restored = left.pass_state, True
            self._new_pass(keras_iterator, steps)
            return
        self._pass_start = steps - left.pass_batches
        self._pass_state = left.pass_state
        if left.state is not None:
            restore_iterator(keras_iterator, left.state)  # seed generator included
            self._in_use, self._restored = keras_iterator, True
        elif left.iterator is not None:  # within the process: the iterator itself goes on
            self._in_use = left.iterator
        else:  # after a resume, a pipeline tf.data cannot save: replay its pass
            self._in_use = iter(keras_iterator._dataset.skip(left.pass_batches))

    # --- checkpoints -----------------------------------------------------------------------

    def checkpoint(self, steps: int) -> tuple[list[bytes | None], dict[str, Any]]:
        """This process's pipeline states for a checkpoint taken after ``steps`` batches
        (now, and as the pass began), and the metadata that goes with them. The first
        inexact one says so (once)."""
        if self._in_use is not None:
            state, why = save_iterator(self._in_use)
            pass_state, pass_batches = self._pass_state, steps - self._pass_start
        elif self._left is not None:
            self._left.take_state()
            state, why, pass_batches = self._left.state, self._left.why, self._left.pass_batches
            pass_state = self._left.pass_state
        else:
            return [None, None], {"pass_batches": 0, "saved": True}
        if why is not None and not self._warned:
            self._warned = True
            how = ("saved without that state: exact only if it is pure" if state is not None
                   else f"replayed on a resume ({pass_batches} batches of the current pass now, "
                   "skipped on a fresh iterator): exact only if it yields the same batches "
                   "every time")
            log.warning("det_sdk: the training pipeline %s cannot be saved exactly by tf.data "
                        "(%s); it is %s; %s", self.name, why, how, FIX)
        return [state, pass_state], {"pass_batches": pass_batches, "saved": state is not None}

    def resume(self, states: list[bytes | None], meta: dict[str, Any] | None,
               batch: int) -> None:
        """Start from a checkpoint's pipeline states (``[now, as the pass began]``, None
        where none was saved; ``meta`` None: a checkpoint from before det_sdk kept them,
        whose ``batch`` is then replayed)."""
        if meta is None:
            self._left = _Left(None, None, None, batch)
            return
        state, pass_state = [*states, None, None][:2]
        self._left = _Left(state, pass_state, None, int(meta.get("pass_batches", 0)))


class UnsavedPipeline(PipelinePosition):
    """A Python generator or iterator given to ``fit``: Keras reads it, nothing can save
    where it is; the first checkpoint says so (once), a resume starts it again."""

    def __init__(self, name: str) -> None:
        self.name, self._warned = name, False

    @contextmanager
    def feeding(self, model: Any, steps_done: Callable[[], int], mid_epoch: bool
                ) -> Iterator[None]:
        yield

    def checkpoint(self, steps: int) -> tuple[list[bytes | None], dict[str, Any]]:
        if not self._warned:
            self._warned = True
            log.warning("det_sdk: the training data %s is a Python generator or iterator: "
                        "where it is cannot be saved, and a resume reads it from its start, "
                        "not from where this run stopped; pass a keras.utils.Sequence or a "
                        "tf.data.Dataset (%s) for an exact resume", self.name, FIX)
        return [None, None], {"pass_batches": 0, "saved": False}

    def resume(self, states: list[bytes | None], meta: dict[str, Any] | None,
               batch: int) -> None:
        pass
