"""``DeterminedCallback`` and ``TensorBoard``: det_sdk's training records for a plain ``model.fit``.

For scripts that keep calling ``model.fit`` themselves (Determined's Keras user
guide) rather than ``context.fit``::

    distributed, strategy = det.core.DistributedContext.from_tf_config()
    with det.core.init(distributed=distributed) as core_context:
        info = core_context.info
        det_cb = det.keras.DeterminedCallback(
            core_context, checkpoint=info.latest_checkpoint, continue_id=info.trial.trial_id)
        model.fit(x, y, epochs=..., validation_data=..., callbacks=[det_cb])

The callback is a thin front over the engine ``context.fit`` uses
(:class:`~det_sdk.keras._loop.TrainingLoop` saves and restores det_sdk's checkpoint
format through the core context's ``checkpoint``; the position, metric-reporting and
periodic-checkpoint hooks are the same classes), so its checkpoints, metrics and
progress are the ones the master and ``det checkpoint``/``load_checkpoint_model`` know.
What differs from ``context.fit``: it works in whole epochs (a pause or Ctrl-C stops at
the next epoch end, and training resumes at an epoch start), the data and its sharding
are the script's own, and the searcher's length can only shorten the script's ``epochs``.

On N processes the strategy trains them where it can (Keras 2:
``MultiWorkerMirroredStrategy`` from ``TF_CONFIG``). Where it cannot (Keras 3 under
``horovodrun``: ``from_tf_config`` then gives Horovod's processes) the callback
does what ``context.fit`` does for them: the model's optimizer averages gradients
exactly, rank 0's weights and optimizer state are broadcast at the start, and each
batch ``model.fit`` draws is split evenly between the processes (``batch_size``
is the global batch, as under the strategy). Every process must therefore pass
the same data in the same order; each step checks that they did, and that the
batch splits evenly, and stops with an error saying what to change otherwise.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from typing import Any

from det_sdk.config import Length
from det_sdk.core._context import Context
from det_sdk.core._distributed import TFWorkers
from det_sdk.engine.policy import TrainingPolicy
from det_sdk.engine.position import Position
from det_sdk.engine.signals import catch_stop_signals
from det_sdk.engine.stopping import StopAgreement
from det_sdk.errors import ArgumentTypeError, DetSdkError, UsageError
from det_sdk.hparams import HParams
from det_sdk.keras import _checkpoint, _compat
from det_sdk.keras._callbacks import (
    AggregateMetrics,
    MetricsReporter,
    PeriodicCheckpoint,
    RecordHistory,
    TrackPosition,
)
from det_sdk.keras._fit_run import FitRun
from det_sdk.keras._horovod import HorovodProcesses
from det_sdk.keras._loop import BROADCAST_MISSED, TrainingLoop

__all__ = ["BatchSplitError", "DeterminedCallback", "TensorBoard", "continues"]

log = logging.getLogger("det_sdk.keras")

# The checkpoint metadata key that keeps the continue_id (TrainingLoop.save's extra).
_CONTINUE_ID = "continue_id"


def continues(metadata: Mapping[str, Any], continue_id: Any) -> bool:
    """True when a checkpoint (its metadata) continues the training of ``continue_id``.

    The seed's rule: the checkpoint was saved with the same ``continue_id`` (on the
    cluster, the same trial): continue its training state (epoch, optimizer, random
    state). Otherwise (another trial's checkpoint, a checkpoint written by
    ``context.fit``, or none recorded): warm start, the weights only, from epoch 0.
    Ids compare as text (``3`` and ``"3"`` are one trial).

    >>> continues({"continue_id": 3}, "3")
    True
    >>> continues({"continue_id": 3}, 4), continues({}, 3)
    (False, False)
    """
    if _CONTINUE_ID not in metadata:
        return False
    return str(metadata[_CONTINUE_ID]) == str(continue_id)


def _start_at_epoch(model: Any, epoch: int | None) -> None:
    """Make the running ``model.fit`` start at ``epoch`` (None: undo).

    Keras offers no public way; both majors honour what ``BackupAndRestore`` sets in
    ``on_train_begin``: Keras 3 reads ``model._initial_epoch``, Keras 2 asks
    ``model._training_state``. Setting both needs no check of the major.
    """
    model._initial_epoch = epoch
    model._training_state = _StartAt(epoch) if epoch is not None else None


class _StartAt:
    """What Keras 2's ``fit`` asks for its first (epoch, step) after ``on_train_begin``."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def maybe_load_initial_counters_from_ckpt(self, *args: Any, **kwargs: Any) -> tuple[int, int]:
        return self.epoch, 0

    def maybe_load_initial_epoch_from_ckpt(self, *args: Any, **kwargs: Any) -> int:
        return self.epoch


class DeterminedCallback(_compat.keras.callbacks.Callback):
    """Metrics, checkpoints, pause/resume and the searcher's length for ``model.fit``.

    - ``core_context``: from :func:`det_sdk.core.init`.
    - ``checkpoint``: a checkpoint uuid to start from, or None (usually
      ``info.latest_checkpoint``, filled in on a resumed trial).
    - ``continue_id``: saved with every checkpoint. A ``checkpoint`` saved with the
      same id continues (weights, optimizer, random state, epoch and History); any
      other is a warm start (weights only, epoch 0). Usually ``info.trial.trial_id``.
    - ``train_metrics_report_period``: ``"epoch"`` or a number of batches between
      training-metric reports (epoch ends always report).
    - ``checkpoint_epochs``: checkpoint every N epochs (0: only at the end and when
      stopped). A checkpoint is also taken when training ends or stops.

    Every epoch end it reports training and validation metrics (validation names as
    ``val_...``) and progress; it stops the fit at the epoch end after a pause, kill,
    SIGTERM or Ctrl-C (after checkpointing), and when the searcher's length is
    reached (reporting the searcher metric; ASHA may lengthen it up to the script's
    ``epochs``). ``initial_epoch`` of ``model.fit`` is overridden on a continue. The
    model must be built (an ``Input`` or ``model.build``) and compiled.

    >>> det_cb = det.keras.DeterminedCallback(core_context, checkpoint=None,
    ...                                       continue_id=1)  # doctest: +SKIP
    >>> model.fit(x, y, epochs=2, validation_data=(xv, yv),
    ...           callbacks=[det_cb])  # doctest: +SKIP
    """

    def __init__(
        self,
        core_context: Any,
        checkpoint: str | None,
        continue_id: int | str,
        *,
        train_metrics_report_period: int | str = "epoch",
        checkpoint_epochs: int = 1,
    ) -> None:
        super().__init__()
        if not isinstance(core_context, Context):
            raise ArgumentTypeError("DeterminedCallback: core_context must come from "
                                    f"det_sdk.core.init(), got {type(core_context).__name__}")
        if checkpoint is not None and not isinstance(checkpoint, str):
            raise ArgumentTypeError("DeterminedCallback: checkpoint must be a checkpoint uuid "
                                    f"(str) or None, got {type(checkpoint).__name__}")
        if not isinstance(continue_id, (int, str)) or isinstance(continue_id, bool):
            raise ArgumentTypeError("DeterminedCallback: continue_id must be an int or a str, got "
                                    f"{type(continue_id).__name__}")
        period = train_metrics_report_period
        if period != "epoch" and (isinstance(period, bool) or not isinstance(period, int)
                                  or period < 1):
            raise UsageError("DeterminedCallback: train_metrics_report_period must be 'epoch' or "
                             f"a number of batches >= 1, got {period!r}")
        if isinstance(checkpoint_epochs, bool) or not isinstance(checkpoint_epochs, int) \
                or checkpoint_epochs < 0:
            raise UsageError("DeterminedCallback: checkpoint_epochs must be an int >= 0, got "
                             f"{checkpoint_epochs!r}")
        self._core = core_context
        self._dist = core_context.distributed
        self._checkpoint = checkpoint
        self._continue_id = continue_id
        self._report_every = None if period == "epoch" else int(period)
        self._checkpoint_epochs = checkpoint_epochs
        self._loop = TrainingLoop(core_context, TrainingPolicy(
            seed=core_context.info.trial_seed,
            checkpoint_period=Length(epochs=checkpoint_epochs) if checkpoint_epochs else None,
            report_every=self._report_every, searcher_metric=core_context.searcher_metric[0],
            max_length=core_context.max_length,
        ), HParams(core_context.info.hparams))
        self._run: FitRun | None = None  # the fit under way (or the last): it decides
        self._hooks: list[Any] = []
        self._target: Length | None = None
        self._searcher_done = False
        self._stopped: str | None = None
        self._signals: contextlib.ExitStack | None = None
        self._signal_received: Any = lambda: None
        # each epoch end: a signal to any process, or the master's request (acknowledged
        # when seen, as should_preempt() does)
        self._agreement = StopAgreement(self._dist, core_context.preempt,
                                        lambda: self._signal_received(), acknowledge=True)
        # N processes that no tf.distribute strategy trains: det_sdk averages and splits
        self._split: _SplitBatches | None = None
        if self._dist.size > 1 and not isinstance(self._dist, TFWorkers):
            if not isinstance(self._dist, HorovodProcesses):
                raise ArgumentTypeError(
                    f"DeterminedCallback: {self._dist.size} processes of a "
                    f"{type(self._dist).__name__}; give det.core.init the distributed context "
                    "of DistributedContext.from_tf_config() or .from_horovod()")
            self._split = _SplitBatches(self._dist)

    # --- state -----------------------------------------------------------------------------

    @property
    def stopped(self) -> str | None:
        """Why the last fit stopped early (``MASTER_STOP``, ``"SIGTERM"``)."""
        return self._stopped

    @property
    def position(self) -> Position:
        """Where training is: epoch, batch, batches trained (also those before a resume)."""
        return self._run.position if self._run is not None else Position(0, 0, 0)

    def _restore(self, model: Any) -> FitRun:
        """The fit's :class:`FitRun`, from where ``checkpoint`` left off when it continues
        this run (a warm start or none: from the start)."""
        uuid = self._checkpoint
        fresh = FitRun(self._loop, model, checkpoints=True, extra={_CONTINUE_ID: self._continue_id})
        if uuid is None:
            return fresh
        if not model.built:
            raise UsageError("DeterminedCallback: the model must be built before fit to load "
                             f"checkpoint {uuid} (give it an Input or call model.build)")
        path = self._core.checkpoint.checkpoint_path(uuid)
        meta = _checkpoint.read_metadata(path)
        if not continues(meta, self._continue_id):
            _checkpoint.load_weights(path, model)
            log.info("det_sdk: warm start from checkpoint %s (weights only)", uuid)
            return fresh
        # The optimizer's variables must exist before its state can be assigned.
        for opt in self._loop.tracked_optimizers(model):
            _compat.optimizer_variables(opt, model.trainable_variables)
        self._loop.restore(model, uuid)
        epoch = int(meta["epoch"])
        _start_at_epoch(model, epoch)
        log.info("det_sdk: continuing from checkpoint %s at epoch %d", uuid, epoch)
        return FitRun(self._loop, model, checkpoints=True,
                      start=Position(epoch, 0, int(meta["steps_completed"])),
                      past=meta.get("history") or {}, saved=True,
                      last_validation=meta.get("metrics") or {},
                      extra={_CONTINUE_ID: self._continue_id})

    # --- Keras hooks ---------------------------------------------------------------------

    def _each(self, hook: str, *args: Any) -> None:
        for cb in self._hooks:
            getattr(cb, hook)(*args)

    def on_train_begin(self, logs: Any = None) -> None:
        model = self.model
        if _compat.model_optimizer(model) is None:
            raise UsageError("DeterminedCallback: compile the model before fit")
        self._stopped, self._searcher_done = None, False
        self._run = run = self._restore(model)
        self._checkpoint = None  # a later fit in this process goes on from where this one ends
        if self._split is not None:
            self._split.install(model, self._loop)
        self._target = self._core.searcher.current_length()
        steps = (self.params or {}).get("steps")
        epochs = int((self.params or {}).get("epochs") or 0)
        total = self._target or self._core.max_length or Length(epochs=max(epochs, 1))
        total_steps = total.batches or (total.epochs * steps if steps else None)
        reporter = MetricsReporter(
            self._core.train, run, self._dist, publish=self._dist.is_chief,
            report_every=self._report_every, total_steps=total_steps)
        self._hooks = [TrackPosition(run), reporter, RecordHistory(run)]
        if self._split is not None:  # the whole batch's metrics, and a check the ranks agree
            self._hooks[1:1] = [_AggregateTraining(self._dist),
                                _InSync(lambda e: self._in_sync(model, e))]
        if self._checkpoint_epochs:
            self._hooks.append(PeriodicCheckpoint(Length(epochs=self._checkpoint_epochs), run))
        for cb in self._hooks:
            cb.set_model(model)
            cb.set_params(self.params)
        if self._target is not None and self._target.unit == "epochs" \
                and self._target.value > epochs:
            log.warning("det_sdk: the searcher asks for %d epochs but model.fit(epochs=%d) "
                        "stops before; give fit at least searcher.max_length epochs",
                        self._target.epochs, epochs)
        self._signals = contextlib.ExitStack()
        self._signal_received = self._signals.enter_context(catch_stop_signals())
        self._each("on_train_begin", logs)

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self._each("on_epoch_begin", epoch, logs)

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        # TrackPosition starts the profiler's batch timer here (det_sdk.profiler)
        self._each("on_train_batch_begin", batch, logs)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self._each("on_train_batch_end", batch, logs)

    def on_test_begin(self, logs: Any = None) -> None:
        self._each("on_test_begin", logs)

    def on_test_batch_end(self, batch: int, logs: Any = None) -> None:
        self._each("on_test_batch_end", batch, logs)

    def _in_sync(self, model: Any, epoch: int) -> None:
        # BatchNormalization's statistics: the ranks' mean, then the guard compares all
        self._loop.average_moving_statistics(model)
        self._loop.check_in_sync(model, f"after epoch {epoch + 1}")

    def on_test_end(self, logs: Any = None) -> None:
        self._each("on_test_end", logs)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self._each("on_epoch_end", epoch, logs)
        if self._target is not None and self._reached(self._target):
            self._complete(logs or {})
        assert self._run is not None
        stop = self._run.stop(self._agreement)  # a collective: every rank the same
        if stop is not None:
            self._stopped = stop.reason
            self.model.stop_training = True
            log.info("det_sdk: stopping after epoch %d: %s", epoch + 1, stop.reason)

    def _reached(self, target: Length) -> bool:
        assert self._run is not None
        if target.epochs is not None:
            return self._run.epoch >= target.epochs
        return self._run.steps_completed >= target.value

    def _complete(self, logs: Mapping[str, Any]) -> None:
        """The searcher's length is trained: checkpoint, report its metric, get the next."""
        assert self._run is not None and self._target is not None
        self._target = self._run.complete(
            self._target, logs, among="this epoch's metrics",
            hint="pass validation_data to fit or name one of them in the experiment config")
        if self._target is None:
            self._searcher_done = True
            self.model.stop_training = True

    def on_train_end(self, logs: Any = None) -> None:
        run = self._run
        try:
            if run is not None and run.steps_completed:
                if not self._stopped and _compat.overwrites_weights(self.model.optimizer):
                    # Keras's fit just overwrote the weights by their moving averages: the
                    # last checkpoint holds the model as fit leaves it (a stop's holds the
                    # weights before, which a resumed fit continues from)
                    run.state_changed()
                run.save()  # whatever was trained since the last checkpoint
            if self._target is not None and run is not None \
                    and not self._searcher_done and not self._stopped \
                    and self._reached(self._target):
                # Resumed from a checkpoint at the searcher's length (the trial stopped
                # before the searcher heard): no epoch ran; report the saved validation.
                self._complete(run.last_validation)
            self._loop.wait_for_checkpoints()
        finally:
            _start_at_epoch(self.model, None)
            if self._split is not None:
                self._split.uninstall(self.model)
            if self._signals is not None:
                self._signals.close()
                self._signals = None


# --- N processes without a strategy: det_sdk averages, broadcasts and splits batches ----------


class _AggregateTraining(AggregateMetrics):
    """The epoch's training metrics from every process's metric state summed (exact for
    every built-in metric, as ``context.fit``'s). Validation is not split: each process
    evaluates all of it and holds the whole data's metrics already."""

    def on_test_end(self, logs: Any = None) -> None:
        pass


class _InSync(_compat.keras.callbacks.Callback):
    """Run ``check(epoch)`` at each epoch end (``TrainingLoop.check_in_sync``)."""

    def __init__(self, check: Any) -> None:
        super().__init__()
        self._check = check

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self._check(epoch)


class BatchSplitError(DetSdkError, ValueError):
    """``DeterminedCallback`` on N processes cannot split a batch of ``model.fit`` exactly:
    it does not divide by N, or the processes were given different batches."""


def _refusals_as_errors(train_function: Any) -> Any:
    """``train_function`` raising :class:`BatchSplitError` for the split step's refusals
    (TensorFlow reports a failed assertion as ``InvalidArgumentError``)."""
    import tensorflow as tf

    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return train_function(*args, **kwargs)
        except tf.errors.InvalidArgumentError as err:
            text = err.message
            if "DeterminedCallback on " not in text:
                raise
            start = text.index("DeterminedCallback on ")
            raise BatchSplitError(text[start:].split("]", 1)[0].replace("\\'", "'")) \
                from None

    return run


_SPLIT_MESSAGE = (
    "DeterminedCallback on {n} processes splits each batch of model.fit evenly between "
    "them (batch_size is the global batch, as under MultiWorkerMirroredStrategy): ")
_UNEVEN = (
    "a batch does not divide by {n}. Make batch_size a multiple of {n} and the number of "
    "samples a multiple of {n} (the last, shorter batch must divide too): drop the last rows, "
    "or batch a tf.data dataset with drop_remainder=True.")
_DIFFERENT = (
    "the processes were given different batches. Every process must pass model.fit the same "
    "data in the same order: build or load it the same way on each, and seed any shuffling "
    "alike (model.fit's shuffle and tf.data's shuffle draw from TensorFlow's global seed, "
    "which from_tf_config makes equal unless the script sets different ones, e.g. a seed "
    "plus the rank).")


def _fingerprint(leaves: list[Any]) -> Any:
    """An int64 digest of a batch's values and their positions (integer arithmetic: the
    same on every process whatever order a reduction takes)."""
    import tensorflow as tf

    digest = tf.constant(0, tf.int64)
    for i, t in enumerate(leaves):
        if isinstance(t, tf.SparseTensor):
            t = t.values
        elif isinstance(t, tf.RaggedTensor):
            t = t.flat_values
        t = tf.reshape(t, [-1])
        if t.dtype == tf.string:
            v = tf.strings.to_hash_bucket_fast(t, 2**62)
        elif t.dtype.is_floating:
            ints = {16: tf.int16, 32: tf.int32, 64: tf.int64}[t.dtype.size * 8]
            v = tf.cast(tf.bitcast(t, ints), tf.int64)
        elif t.dtype.is_integer or t.dtype == tf.bool:
            v = tf.cast(t, tf.int64)
        else:
            continue
        weights = tf.range(1, tf.size(v, out_type=tf.int64) + 1, dtype=tf.int64)
        digest = digest * 1000003 + i + tf.reduce_sum(v * weights)
    return digest


def _rows(t: Any) -> Any:
    import tensorflow as tf

    if isinstance(t, tf.RaggedTensor):
        return t.nrows()
    if isinstance(t, tf.SparseTensor):
        return t.dense_shape[0]
    return tf.shape(t, out_type=tf.int64)[0]


def _take_rows(t: Any, start: Any, count: Any) -> Any:
    import tensorflow as tf

    if t is None:
        return None
    if isinstance(t, tf.SparseTensor):
        shape = tf.concat([[count], t.dense_shape[1:]], 0)
        begin = tf.concat([[start], tf.zeros_like(t.dense_shape[1:])], 0)
        return tf.sparse.slice(t, begin, shape)
    return t[start:start + count]


class _SplitBatches:
    """Train N Horovod processes under a plain ``model.fit``, as ``context.fit`` would.

    At ``install`` (``on_train_begin``): the model's optimizer averages gradients
    (:func:`_compat.average_in_place`), rank 0's weights and optimizer state go to
    every process, XLA is turned off (Horovod has no XLA kernels), and the model's
    ``train_step`` takes this process's part of each batch: rows
    ``[rank * B/N, (rank + 1) * B/N)`` of the batch of ``B`` rows every process draws.
    The averaged gradient of the parts is the gradient of the whole batch (a mean
    loss), so N processes train as one does on the same batches. One small
    allgather per step compares the processes' batches (a digest of their values)
    before any of them trains on its part.
    """

    def __init__(self, dist: HorovodProcesses) -> None:
        self.dist = dist

    def install(self, model: Any, loop: TrainingLoop) -> None:
        opt = _compat.model_optimizer(model)
        if not model.built:
            raise UsageError(
                f"DeterminedCallback on {self.dist.size} processes: the model must be built "
                "before fit (rank 0's weights are broadcast when training begins): give it "
                "a keras.Input or call model.build(input_shape)")
        _compat.average_in_place(opt, self.dist.average_gradients, self.dist.size)
        _compat.weigh_alike()  # its processes split every batch evenly
        for o in loop.tracked_optimizers(model):
            _compat.optimizer_variables(o, model.trainable_variables)
        loop.broadcast(model)
        loop.check_in_sync(model, "at the start of training", False, BROADCAST_MISSED)
        loop.turn_off_xla(model)
        self.uninstall(model)  # a fit that raised left its split step: split once, not twice
        model.train_step = self._split_step(model.train_step)
        model.make_train_function(force=True)  # traced anew: averaging apply, split step
        model.train_function = _refusals_as_errors(model.train_function)

    def uninstall(self, model: Any) -> None:
        if "train_step" in vars(model):
            del model.train_step
            model.train_function = None

    def _split_step(self, step: Any) -> Any:
        import horovod.tensorflow as hvd
        import tensorflow as tf

        n, rank = self.dist.size, self.dist.rank
        prefix = _SPLIT_MESSAGE.format(n=n)

        def train_step(data: Any) -> Any:
            leaves = [t for t in tf.nest.flatten(data, expand_composites=False)
                      if t is not None]
            rows = _rows(leaves[0])
            mine = tf.stack([_fingerprint(leaves), rows])
            every = hvd.allgather(mine[None, :], name="det_sdk.split_batches")
            same = tf.debugging.Assert(tf.reduce_all(tf.equal(every, mine[None, :])),
                                       [prefix + _DIFFERENT])
            even = tf.debugging.Assert(tf.equal(rows % n, 0),
                                       [prefix + _UNEVEN.format(n=n), "rows:", rows])
            with tf.control_dependencies([same, even]):
                part = rows // n
                start = part * rank
            return step(tf.nest.map_structure(lambda t: _take_rows(t, start, part), data))

        return train_step


class TensorBoard(_compat.keras.callbacks.TensorBoard):
    """Keras's ``TensorBoard`` callback writing into the trial's TensorBoard directory.

    Takes what ``keras.callbacks.TensorBoard`` takes, after ``core_context``; the
    directory is the core context's ``tensorboard_dir`` (``det-runs/<n>/tensorboard``
    locally; on the cluster the trial's, which ``det tensorboard EXP_ID`` shows). Other
    processes than the chief write to a scratch directory, so one copy of the events is
    kept.

    >>> tb_cb = det.keras.TensorBoard(core_context, histogram_freq=1)  # doctest: +SKIP
    """

    def __init__(self, core_context: Any, *args: Any, **kwargs: Any) -> None:
        if not isinstance(core_context, Context):
            raise ArgumentTypeError("TensorBoard: core_context must come from "
                                    f"det_sdk.core.init(), got {type(core_context).__name__}")
        if args or "log_dir" in kwargs:
            given = kwargs.pop("log_dir", args[0] if args else None)
            args = args[1:]
            log.warning("det_sdk: TensorBoard(log_dir=%r) ignored: events go to the trial's "
                        "TensorBoard directory", given)
        logdir: str | os.PathLike[str] | None = core_context.tensorboard_dir
        self._scratch: str | None = None
        if logdir is None or not core_context.distributed.is_chief:
            logdir = self._scratch = tempfile.mkdtemp(prefix="det-tensorboard-")
        super().__init__(str(logdir), *args, **kwargs)

    def on_train_end(self, logs: Any = None) -> None:
        super().on_train_end(logs)
        if self._scratch is not None:  # another process's copy: nobody reads it
            shutil.rmtree(self._scratch, ignore_errors=True)
