"""The training loop's owner: resume state, position, save/restore, broadcast, evaluation.

``det.keras.init()`` builds one :class:`TrainingLoop` from the policy it decided
(:class:`TrainingPolicy`) and the core context it opened (``det_sdk.core.Context``: the
distributed context, records and checkpoints).
``KerasContext`` is its thin front; ``_fit.run_fit`` drives ``model.fit`` through
it; the callbacks are hooks that call back into it. Nothing here asks where it
runs or which Keras it is: the seams and ``_compat`` answer.

>>> # loop = TrainingLoop(core_context, TrainingPolicy(seed=1, checkpoint_period=None))
"""

from __future__ import annotations

import copy
import functools
import logging
import time
import uuid as uuidlib
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import tensorflow as tf

from det_sdk.core._context import Context
from det_sdk.engine.policy import TrainingPolicy
from det_sdk.engine.position import Position, position_of
from det_sdk.engine.writer import CheckpointWriter
from det_sdk.errors import ArgumentTypeError, DivergenceError, UsageError
from det_sdk.hparams import HParams
from det_sdk.keras import _checkpoint, _compat, _data
from det_sdk.keras._callbacks import (
    AverageStepOutputs,
    aggregated_results,
    combine_logs,
)
from det_sdk.keras._inputs import batch_rows
from det_sdk.stages import DEFAULT_STAGE

if TYPE_CHECKING:
    from det_sdk.keras._fit_run import FitRun

__all__ = ["TrainingLoop"]

log = logging.getLogger("det_sdk.keras")


#: What a divergence after training steps most likely comes from.
_TRAINED_APART = (
    "Likely causes: the model was compiled with an optimizer not wrapped by "
    "context.wrap_optimizer (also a string like optimizer='adam'), or a custom train_step or "
    "loop changes weights without the wrapped optimizer's apply/apply_gradients (e.g. "
    "var.assign_add). Wrap every optimizer with context.wrap_optimizer and update weights "
    "only through them.")

#: What a divergence right after the start's broadcast comes from.
BROADCAST_MISSED = (
    "Rank 0's weights had just been broadcast to every process, so this is det_sdk's "
    "fault or Horovod's, not the script's: please report it with this message.")


class TrainingLoop:
    """Owns everything a run carries from one ``fit`` to the next, and its state operations."""

    def __init__(
        self,
        core: Context,
        policy: TrainingPolicy,
        hparams: HParams | None = None,
    ) -> None:
        self.core = core
        self.distributed = core.distributed
        self.policy = policy
        self.hparams = hparams
        self._optimizers: list[Any] = []  # as wrapped, in the order wrapped
        self._given: dict[int, Any] = {}  # id(wrapped) -> the optimizer the user built
        # The checkpoint a resumed run continues from: the first fit consumes it; a
        # later fit in the same process trains its model afresh.
        self.resume_uuid: str | None = core.checkpoint.latest_checkpoint
        # The latest fit (it owns where training is: read its position, hold no copy)
        self.current: FitRun | None = None
        # model -> {with non-trainable state: (compiled fingerprint fn, its variables)}.
        # Keyed by the model itself, weakly: an id would outlive its model, and a new
        # model made at a freed one's address would be checked by the old one's weights
        # on one process and not on another (and the old weights would never be freed).
        self._fingerprints: weakref.WeakKeyDictionary[Any, dict[bool, Any]] = (
            weakref.WeakKeyDictionary())
        # Where the state of the fit under way lives: found at its first save rather
        # than at every one (walking the layers costs more than reading the state)
        self._layout: _checkpoint.StateLayout | None = None
        self.writer = CheckpointWriter()  # checkpoints are written in the background
        # The searcher's protocol, det.core's (one length at a time; off the cluster no
        # length: the script's epochs, or a TFKerasTrial's searcher.max_length)
        self.searcher = core.searcher
        # Random-state variables already given this rank's own seeds (once each), by id;
        # weakly held: a freed variable's id may come back as a new one's
        self._distinct_rng: weakref.WeakValueDictionary[int, Any] = (
            weakref.WeakValueDictionary())
        # Inner models' own optimizers a checkpoint leaves out, with their step counts
        self._left_out: weakref.WeakKeyDictionary[Any, list[tuple[Any, int]]] = (
            weakref.WeakKeyDictionary())  # by model

    # --- optimizers -----------------------------------------------------------------------

    def wrap_optimizer(self, optimizer: Any, compression: str | None = None) -> Any:
        """Track ``optimizer``; with several processes, one that averages gradients
        (``compression="fp16"``: sent as float16)."""
        if not isinstance(optimizer, _compat.OPTIMIZER_TYPES):
            raise ArgumentTypeError(
                "wrap_optimizer: expected a keras optimizer instance, got "
                f"{type(optimizer).__name__}"
            )
        wrapped = optimizer
        if self.distributed.size > 1:
            average = self.distributed.average_gradients
            if compression is not None:
                average = functools.partial(average, compression=compression)
                if self.distributed.is_chief:
                    log.warning("det_sdk: gradients sent as float16 between the %d processes "
                                "(compression=%r): they train close to, not exactly, what "
                                "one process trains", self.distributed.size, compression)
            wrapped = _compat.averaging_optimizer(optimizer, average, self.distributed.size)
        self._optimizers.append(wrapped)
        self._given[id(wrapped)] = optimizer
        return wrapped

    def tracked_optimizers(self, model: tf.keras.Model) -> list[Any]:
        """The optimizers whose state a checkpoint holds: the model's first, then the
        other wrapped ones that train this model's variables (another model's
        optimizer, or one not used yet, is not this model's state; nor is the optimizer
        a model inside it was compiled with, which that model's own fit trained: a
        distiller's teacher's)."""
        own = _compat.model_optimizer(model)
        # what the model's optimizer wraps (the one given to a loss-scale optimizer,
        # which compile makes under mixed_float16) is in the model's optimizer's state
        chain = [id(o) for o in _compat.wrapped_chain(own)]
        extra = [o for o in self._optimizers if id(o) not in chain
                 and _compat.optimizer_trains_only(o, model.trainable_variables)
                 and not _inner_models_optimizer(o, model)]
        return [own, *extra] if own is not None else extra

    def _note_left_out(self, model: tf.keras.Model) -> None:
        """Remember the step counts of the optimizers a checkpoint of ``model`` leaves out
        for being an inner model's own (:meth:`tracked_optimizers`): one that steps while
        ``model`` trains is refused at the next checkpoint (:meth:`_check_left_out`)."""
        self._left_out[model] = [(o, int(o.iterations.numpy())) for o in self._optimizers
                                     if _inner_models_optimizer(o, model)
                                     and _compat.optimizer_built(o)]

    def _check_left_out(self, model: tf.keras.Model) -> None:
        for opt, steps in self._left_out.get(model, []):
            if int(opt.iterations.numpy()) != steps:
                raise UsageError(
                    f"context.fit: the optimizer {type(opt).__name__} that a model inside "
                    "the one being trained was compiled with updated weights during this "
                    "fit (its train_step applies it): checkpoints leave a model's inner "
                    "models' own optimizers out (their own fits trained them), so a resume "
                    "would not restore its state. Give the optimizer to the outer model "
                    "(an attribute set in its compile(), as a GAN's d_optimizer) or compile "
                    "the outer model with it")

    def _optimizer_state(self, model: tf.keras.Model) -> list[Any]:
        variables: list[Any] = []
        for opt in self.tracked_optimizers(model):
            variables += _compat.optimizer_variables(opt, model.trainable_variables)
        return variables

    # --- before training ------------------------------------------------------------------

    def prepare(self, model: tf.keras.Model, sample_input: Any,
                sample_batch: Any = None) -> None:
        """Checks and set-up before a ``fit``: what Horovod needs to train correctly.

        ``sample_input()`` returns one batch of inputs, used to build a model that
        was defined without an input shape; ``sample_batch()`` one batch as
        ``train_step`` receives it, used to create what a custom ``train_step`` makes
        on first use. Every variable must exist before a checkpoint is restored into
        it and before rank 0's are broadcast.
        """
        # First: the state layout below wraps the optimizers' apply methods as they are
        if _compat.average_outermost(_compat.model_optimizer(model)):
            model.train_function = None  # traced averaging inside the loss-scale optimizer
        if self.distributed.size > 1 and _compat.count_rows(model):
            # each process's gradients weighted by its batch's rows (_compat._share):
            # an uneven last batch (16 rows and 2) averages as one process's 18 rows
            model.train_function = None
        if not model.built and _compat.implements_call(model):
            model(sample_input(), training=False)
        if sample_batch is not None and self._made_in_first_step(model):
            _compat.trace_train_step(model, sample_batch())
        if self.distributed.size > 1:
            fresh = [v for v in _compat.rng_variables(model)
                     if self._distinct_rng.get(id(v)) is not v]
            _compat.distinct_random_state(fresh, self.distributed.rank)
            self._distinct_rng.update((id(v), v) for v in fresh)
        for opt in self.tracked_optimizers(model):
            _compat.optimizer_variables(opt, model.trainable_variables)
        self._note_left_out(model)
        # A new fit: the model may have changed since the last. The first read of a
        # model's variables costs ~2 ms (TensorFlow sets up each handle once): paid here,
        # not at the first epoch's end (and not at all when nothing is checkpointed).
        self._layout = None
        if self.policy.checkpoint_period is not None:
            layout = self._state_layout(model)
            layout.read()
            if self.distributed.is_chief:
                # model.json's content (architecture, compile config), found once a fit:
                # here, before training, it costs about 2 ms; in the writer thread during
                # training it cost 11 ms of CPU (Keras's optimizer get_config reads the
                # learning-rate variable, three times, each read waiting on the step)
                layout.model_spec()
            if layout.changed_updates:
                # Its step function (if the model trained before) updates in place,
                # which makes every checkpoint copy the state: Keras traces it anew.
                model.train_function = None
        if self.distributed.size == 1:
            return
        opt = _compat.model_optimizer(model)
        if opt is not None and not _compat.is_averaging(opt) and not self._optimizers:
            raise UsageError(
                f"context.fit: the model was compiled with an optimizer "
                f"({type(opt).__name__}) that context.wrap_optimizer did not wrap; with "
                f"{self.distributed.size} processes its gradients would not be averaged and "
                "the processes would train apart. Compile with "
                "optimizer=context.wrap_optimizer(keras.optimizers.<Name>(...))"
            )
        overwritten = _compat.overwritten_by_gradient(model)
        if overwritten:
            # their "gradients" are new values (an amax history: a max over the batch's
            # rows); averaged over the processes they are not one process's max, and the
            # float8 scales drift (keras-io's float8 transformer, 24 steps on 2 processes:
            # weights 0.36 apart from one process's, max abs)
            raise UsageError(
                f"context.fit: {len(overwritten)} variables of the model "
                f"({', '.join(overwritten[:3])}{', ...' if len(overwritten) > 3 else ''}) "
                "are overwritten by their gradient (float8 training: model.quantize("
                f"\"float8\")); on {self.distributed.size} processes their values would be "
                "averaged over the processes, not taken over the whole batch, and training "
                "would differ from one process's. Train the float8 model on one process, "
                "or quantize after training (model.quantize(\"float8\") on the trained model)."
            )
        synchronized = [layer.name for layer in _compat.layers_of(model)
                        if getattr(layer, "synchronized", False) is True]
        if synchronized and self.distributed.is_chief:
            # Keras synchronizes them across a tf.distribute strategy's replicas only;
            # under det_sdk's processes each normalizes by its own rows (docs/horovod.md)
            log.warning(
                "det_sdk: BatchNormalization(synchronized=True) layers (%s) normalize by "
                "each process's own %s of the batch here, not by the global batch: "
                "training is close to, not the same as, one process's",
                ", ".join(synchronized[:3]) + (", ..." if len(synchronized) > 3 else ""),
                f"1/{self.distributed.size}")
        self.turn_off_xla(model)

    @staticmethod
    def turn_off_xla(model: tf.keras.Model) -> None:
        """Train ``model`` without XLA, saying so once: Horovod's collectives have no XLA
        kernels."""
        if _compat.turn_off_xla(model):
            log.warning("det_sdk: XLA (jit_compile) turned off: Horovod's collectives have no "
                        "XLA kernels. Training with several processes runs without XLA.")

    def _made_in_first_step(self, model: tf.keras.Model) -> bool:
        """Whether ``model``'s own ``train_step`` would create variables in its first step:
        layers it calls that are not built yet (a model with no ``call()``), or wrapped
        optimizers never used (a GAN builds its two in its first step)."""
        if not _compat.overrides_train_step(model):
            return False
        # the model's own compiled optimizer is built below for all its trainable
        # variables (as before; a reloaded checkpoint expects that)
        own = _compat.model_optimizer(model)
        return (any(not layer.built for layer in _compat.layers_of(model)[1:])
                or any(not _compat.optimizer_built(o) for o in self._optimizers
                       if o is not own))

    # --- resume, restore, broadcast -------------------------------------------------------

    def resume_point(self, uuid: str | None
                     ) -> tuple[Position | None, str | None, dict[str, Any] | None]:
        """Where a fit resuming from checkpoint ``uuid`` starts: its position, the uuid and
        the History so far (all None for ``uuid`` None: a fresh start)."""
        if uuid is None:
            return None, None, None
        meta = self._metadata(uuid)
        past = meta.get("history")
        return position_of(meta), uuid, past if isinstance(past, dict) else None

    def peek_position(self) -> Position:
        """Where training is: the latest fit's position, or the resume checkpoint's."""
        if self.current is not None:
            return self.current.position
        if self.resume_uuid is not None:
            return position_of(self._metadata(self.resume_uuid))
        return Position(0, 0, 0)

    def _metadata(self, uuid: str) -> dict[str, Any]:
        return _checkpoint.read_metadata(self.core.checkpoint.checkpoint_path(uuid))

    def restore(self, model: tf.keras.Model, uuid: str) -> None:
        """Load a checkpoint's weights, optimizer and this process's random state."""
        _checkpoint.restore_state(self.core.checkpoint.checkpoint_path(uuid), model,
                                  self.tracked_optimizers(model), rank=self.distributed.rank)

    def broadcast(self, model: tf.keras.Model) -> None:
        """Make every process start from rank 0's weights and optimizer state.

        Not the random state: each process keeps its own (dropout masks differ
        between shards as they do between samples). Lookup layers' vocabularies
        (not variables) go as objects; preprocessing layers then recompute what they
        derive from their variables (``Normalization``'s mean and variance).
        """
        variables = [*_compat.model_variables(model), *self._optimizer_state(model)]
        self.distributed.broadcast_variables([_compat.backing_variable(v) for v in variables])
        lookups = _compat.lookup_layers(model)
        if lookups and self.distributed.size > 1:
            vocabularies = cast("list[Any]", self.distributed.broadcast(  # rank 0's, never None
                [_checkpoint.vocabulary(layer) for layer in lookups]
                if self.distributed.is_chief else None))
            if not self.distributed.is_chief:
                for layer, vocab in zip(lookups, vocabularies):
                    _checkpoint.set_vocabulary(layer, vocab)
        if self.distributed.size > 1:
            _compat.refresh_preprocessing(model)

    # --- the divergence guard -------------------------------------------------------------

    def average_moving_statistics(self, model: tf.keras.Model) -> None:
        """Make every process's ``BatchNormalization`` moving statistics their mean.

        Each process normalizes its batches by their own statistics (as Horovod's
        plain ``DistributedOptimizer`` and Determined do; synchronised batch norm
        would cost a collective per layer per step), so each one's moving mean and
        variance follow its shard. Called before each validation, at each epoch's end
        and before each checkpoint: validation, the guard and checkpoints then see
        one set of statistics, the mean over shards (float64; the mean of equal
        values is that value, so a repeat changes nothing). One small allgather.
        """
        stats = _compat.moving_statistics(model) if self.distributed.size > 1 else []
        if not stats:
            return
        every = self.distributed.allgather([v.numpy() for v in stats])
        for i, var in enumerate(stats):
            mean = np.mean([np.asarray(mine[i], np.float64) for mine in every], axis=0)
            var.assign(mean.astype(np.asarray(every[0][i]).dtype))

    def check_in_sync(self, model: tf.keras.Model, where: str, state: bool = True,
                      cause: str = _TRAINED_APART) -> None:
        """Stop with :class:`DivergenceError` if the processes' weights differ.

        Trainable weights always; with ``state`` the non-trainable ones too (moving
        statistics, once :meth:`average_moving_statistics` made them agree). One small
        allgather of a float64 sum per variable. Every process runs it at the same
        point and sees the same gathered values, so all raise together. ``cause``: what
        the error tells the user to look at.
        """
        if self.distributed.size == 1:
            return
        per_model = self._fingerprints.setdefault(model, {})
        fn = per_model.get(state)
        if fn is None:
            variables = list(model.trainable_weights)
            if state:
                variables += _compat.shared_state_variables(model)

            @tf.function(autograph=False, jit_compile=False)
            def fingerprint() -> tf.Tensor:
                return tf.stack([tf.reduce_sum(tf.cast(v, tf.float64)) for v in variables])

            fn = per_model[state] = (fingerprint, variables)
        fingerprint, variables = fn
        if not variables:
            return
        mine = fingerprint().numpy()[None, :]
        every = self.distributed.gather_arrays(mine)
        differs = np.flatnonzero((every != every[0]).any(axis=0))
        if differs.size == 0:
            return
        first = int(differs[0])
        name = _compat.variable_name(variables[first])
        sums = ", ".join(f"rank {r}: {float(row[first])!r}" for r, row in enumerate(every))
        raise DivergenceError(
            f"det_sdk: {where}, the {self.distributed.size} processes hold different weights "
            f"({differs.size} of {len(variables)} variables differ, first {name!r}: its sum "
            f"is {sums}); training would go on silently wrong. {cause}")

    # --- checkpoints ----------------------------------------------------------------------

    def save(
        self, model: tf.keras.Model, position: Position, metrics: Mapping[str, float],
        history: Mapping[str, Any] | None = None, extra: Mapping[str, Any] | None = None,
        *, stage: str = DEFAULT_STAGE, searched: bool = True,
        arrays: Sequence[tuple[str, str, Any]] = (),
    ) -> str | None:
        """Save a checkpoint (collective: every process calls it at the same point).

        ``history`` (epochs and their logs so far) goes into the metadata, so a
        resumed ``fit`` returns the whole run's History. ``extra`` adds keys of the
        caller's to the metadata (JSON-able; they may not replace the loop's own).
        ``stage`` and ``searched``: the stage (det_sdk.stages) the checkpoint is
        reported as, taken now (it is written and reported in the background).
        ``arrays``: the caller's own ``(group, name, numpy array)`` entries of the state
        file, already every process's (the training pipelines' states), read back with
        ``_checkpoint.read_group``.
        """
        self._check_left_out(model)
        layout = self._state_layout(model)
        self.average_moving_statistics(model)  # the state a resumed run starts from on all
        rng_states = None  # one process: its own, read with the rest
        if self.distributed.size > 1:  # each process's own RNG state goes into rank 0's file
            rng_states = self.distributed.allgather([t.numpy() for t in layout.read()[1]])
        if not self.distributed.is_chief:
            return None
        metadata = {
            **position.as_dict(),
            "seed": self.policy.seed,
            "hparams": self.hparams.to_dict() if self.hparams is not None else {},
            "metrics": dict(metrics),
            "trial_id": self.core.run_id,
            "processes": self.distributed.size,
            "created": time.time(),
            # a copy: the writer serialises it while training appends to the History
            "history": copy.deepcopy(dict(history or {})),
        }
        clash = set(extra or {}) & set(metadata)
        if clash:
            raise UsageError(f"checkpoint metadata: {sorted(clash)} are det_sdk's own keys")
        metadata.update(extra or {})
        # Taken now (one TensorFlow op); written while training goes on.
        snap = layout.snapshot(rng_states)
        snap.arrays += list(arrays)
        uuid = str(uuidlib.uuid4())
        record = {**position.as_dict(), "metrics": dict(metrics), "keras_backend": "tensorflow"}

        def write() -> Callable[[], None]:  # the publish: after the snapshot is dropped
            return self.core.checkpoint.write_staged(
                uuid, lambda path: {**record, "size": _checkpoint.write_snapshot(
                    path, snap, metadata)}, stage=stage, searched=searched)

        self.writer.submit(write)
        return uuid

    def _state_layout(self, model: tf.keras.Model) -> _checkpoint.StateLayout:
        """Where ``model``'s training state lives (kept while the model and optimizers are
        the same objects)."""
        opts = self.tracked_optimizers(model)
        plain = self._given.get(id(opts[0]), opts[0]) if opts else None
        if self._layout is None or not self._layout.fits(model, opts, plain):
            self._layout = _checkpoint.StateLayout(model, opts, plain)
        return self._layout

    def wait_for_checkpoints(self) -> None:
        """Block until the last checkpoint is written and reported (raise if it failed)."""
        self.writer.wait()

    # --- evaluation -----------------------------------------------------------------------

    def evaluate_all(self, model: tf.keras.Model, x: Any, y: Any = None,
                     **kwargs: Any) -> dict[str, float]:
        """``model.evaluate`` of every process's part, as one process on all of it; no records.

        Each process evaluates its part (numpy and Sequences shared out, datasets as
        given) with no collective per batch, so the parts may differ in size, even be
        empty. Then the metrics' states are summed over processes and read
        (:func:`aggregated_results`): every built-in metric equals its value on the
        whole data.
        """
        dist = self.distributed
        x, y, sw, rows, _ = _data.local_part(dist, x, y, kwargs.pop("sample_weight", None),
                                             where="context.evaluate: x, y")
        # What a custom test_step returns besides metrics: mean over batches by rows
        outputs = AverageStepOutputs(dist, batch_rows(x, kwargs.get("batch_size")))
        kwargs["callbacks"] = [*(kwargs.get("callbacks") or []), outputs]
        if dist.size == 1:
            logs = model.evaluate(x, y, sample_weight=sw, return_dict=True, **kwargs)
            return {**{k: float(v) for k, v in logs.items()}, **outputs.combined(model)}
        if not dist.is_chief:
            kwargs["verbose"] = 0
        if rows == 0 or (isinstance(x, _compat.SequenceBase) and len(x) == 0):
            model.reset_metrics()  # nothing here: this process adds zeros to the sums
            logs = {}
        else:
            logs = model.evaluate(x, y, sample_weight=sw, return_dict=True, **kwargs)
        combined = combine_logs(logs, aggregated_results(model, dist), dist)
        return {**combined, **outputs.combined(model)}


def _inner_models_optimizer(opt: Any, model: tf.keras.Model) -> bool:
    """Whether ``opt`` is the optimizer a model inside ``model`` was compiled with (a
    distiller's teacher's, trained by the teacher's own fit) and not one ``model`` holds
    itself (a GAN's ``d_optimizer``, given to its ``compile``)."""
    if any(value is opt for value in vars(model).values()):
        return False
    return any(inner is not model and _compat.model_optimizer(inner) is opt
               for inner in _compat.layers_of(model) if isinstance(inner, _compat.keras.Model))
