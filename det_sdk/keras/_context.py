"""``KerasContext``: what ``det.keras.init()`` returns, and the API a training script uses."""

from __future__ import annotations

import os
import sys
import weakref
from collections.abc import Mapping
from typing import Any, cast

import tensorflow as tf

from det_sdk.core._context import Context
from det_sdk.engine.policy import TrainingPolicy
from det_sdk.engine.position import Position
from det_sdk.engine.signals import MASTER_STOP
from det_sdk.errors import ArgumentTypeError, StateError, UsageError
from det_sdk.hparams import HParams
from det_sdk.info import ClusterInfo
from det_sdk.keras import _checkpoint, _compat, _data, _fit, _preprocessing
from det_sdk.keras._fit_run import Preempted
from det_sdk.keras._loop import TrainingLoop
from det_sdk.keras._training import TrainingContext
from det_sdk.stages import DEFAULT_STAGE, RunStages, check_stage_name

__all__ = ["KerasContext", "TrainingContext"]


class KerasContext:
    """The training script's handle on distribution, records and checkpoints.

    Made by :func:`det_sdk.keras.init`, never directly::

        context = det.keras.init()
        x, y = context.wrap_data(x, y)
        model.compile(optimizer=context.wrap_optimizer(keras.optimizers.SGD(0.01)), ...)
        context.fit(model, x=x, y=y, validation_data=(xv, yv), epochs=3)
    """

    def __init__(
        self,
        *,
        core: Context,
        hparams: HParams | None,
        config_data: Mapping[str, Any],
        policy: TrainingPolicy,
        info: ClusterInfo | None = None,
        searched_stage: str | None = None,
    ) -> None:
        # det.core's context: records, checkpoints, preemption and the searcher go through
        # it (and its distributed context is this one's)
        self.core = core
        self.distributed = core.distributed
        self.config_data: dict[str, Any] = dict(config_data)
        self.info = info
        self._training = TrainingContext(hparams) if hparams is not None else None
        self._loop = TrainingLoop(core, policy, hparams)
        # layers adapted before wrap_data (on data batched by shard_batch_size's share)
        # see the global batches too
        if self.distributed.size > 1:
            _preprocessing.adapt_over_all_rows(self.distributed)
        # The run's stages (det_sdk.stages): read at the first fit, as far as the script goes
        self._stages: RunStages | None = None
        self._searched_stage = searched_stage
        # model -> the stage that last trained it (weakly: not an id a new model could reuse)
        self._trained_in: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        # The latest fit's stage and whether it is the searched one: an evaluate of a model
        # no fit trained is recorded in it, and every evaluate carries its searched flag
        self._latest_stage: tuple[str, bool] = (DEFAULT_STAGE, True)
        self._stage_positions: dict[str, tuple[int, int]] = {}  # stage -> (steps, epoch) at end

    @property
    def trial_id(self) -> int | None:
        """This run's id locally (``det-runs/<id>``), the trial's id on the cluster;
        None in a generic job (``det job run``), which is no trial.

        Example::

            context.trial_id  # 3
        """
        tid = self.core.run_id
        return int(tid) if tid is not None else None

    @property
    def seed(self) -> int:
        """The run's seed (recorded; a resumed run reuses it)."""
        return self._loop.policy.seed

    # --- hyperparameters ------------------------------------------------------------------

    @property
    def training(self) -> TrainingContext:
        """The training side of the context (``context.training.hparams``).

        Raises ``RuntimeError`` in a generic job (``det job run``), which does not train.
        """
        if self._training is None:
            raise StateError(
                "context.training is not available in a generic job (det job run): "
                "there are no hyperparameters; use context.config_data instead"
            )
        return self._training

    @property
    def hparams(self) -> HParams:
        """Shorthand for ``context.training.hparams``."""
        return self.training.hparams

    # --- wrapping -----------------------------------------------------------------------

    def wrap_data(self, x: Any, y: Any = None, sample_weight: Any = None) -> Any:
        """Shard data for this process; returns the same kind it was given.

        Example::

            x, y = context.wrap_data(x, y)            # numpy (or lists/dicts of arrays)
            x, y, w = context.wrap_data(x, y, w)      # with sample weights
            seq = context.wrap_data(seq)              # keras.utils.Sequence
            ds = context.wrap_data(ds)                # tf.data.Dataset: ds.shard()

        Preprocessing layers adapted on what it returns adapt over all the rows, as on
        one process (``_preprocessing``).
        """
        _preprocessing.adapt_over_all_rows(self.distributed)
        return _data.wrap_data(self.distributed, x, y, sample_weight)

    def wrap_optimizer(self, optimizer: Any, compression: Any = None) -> Any:
        """Track ``optimizer`` so its state is checkpointed; distribute it when needed.

        With several processes it returns a new optimizer of the same class and
        settings that averages gradients across processes where they are applied
        (``apply``/``apply_gradients``): ``fit``, a custom ``train_step``, gradient
        clipping and loss scaling all see the averaged gradients. Wrap each
        optimizer of a multi-optimizer model (a GAN's two).

        ``compression``: ``"fp16"`` (or Horovod's ``hvd.Compression.fp16``) sends the
        gradients as float16 between processes, as Horovod's ``DistributedOptimizer``
        does: half the bytes, and the averaged gradients rounded to float16, so N
        processes no longer train exactly what one does (said once at start-up).

        Example::

            opt = context.wrap_optimizer(keras.optimizers.SGD(0.01))
            opt = context.wrap_optimizer(keras.optimizers.Adam(1e-3), compression="fp16")
        """
        return self._loop.wrap_optimizer(optimizer, compression_name(compression))

    # --- training -------------------------------------------------------------------------

    def fit(self, model: Any, *args: Any, stage: str | None = None, **kwargs: Any) -> Any:
        """Train ``model`` as ``model.fit`` would, with checkpoints, metrics and resumption.

        Takes what ``model.fit`` takes, plus the proposal's ``x_val``/``y_val``.
        Validation data is optional, as in ``model.fit``; the fit the searcher sets the
        length of on the cluster needs it (the searcher decides by a validation metric),
        and is refused without it before its first step. Off the cluster ``epochs`` and
        ``initial_epoch`` are honoured; a resumed run starts from its latest checkpoint,
        its data (a ``tf.data`` pipeline's shuffle buffers and seeds too) and callbacks
        where the uninterrupted run would have them. Returns the Keras ``History``.

        Each ``fit`` is a *stage* of the run with its own checkpoints, metrics (steps
        from 0) and best: ``stage="teacher"`` names it; unnamed ones are ``fit``,
        ``fit-2``, ... in call order. A resumed run resumes the stage it stopped in;
        stages it had finished are not trained again, their models are restored from
        their last checkpoints. On the cluster the searcher's length applies to one
        stage (``init(searched_stage=...)``; default the first ``fit``), the others
        train their ``epochs``.

        Example::

            hist = context.fit(model, x=x, y=y, batch_size=32, epochs=3,
                               validation_data=(x_val, y_val))
            hist.history["val_loss"][-1]
            context.fit(student, x=x, y=y, epochs=5, validation_data=val, stage="student")
        """
        names = ("x", "y", "batch_size", "epochs")
        if len(args) > len(names):
            raise ArgumentTypeError("context.fit: pass arguments after epochs by keyword")
        for name, value in zip(names, args):
            if name in kwargs:
                raise ArgumentTypeError(f"context.fit: got two values for {name!r}")
            kwargs[name] = value
        current = self._run_stages().begin("fit", stage)
        self._latest_stage = (current.name, current.searched)
        outcome = _fit.run_fit(self._loop, model, kwargs, current)
        self._trained_in[model] = current.name
        pos = outcome.position
        self._stage_positions[current.name] = (pos.steps_completed, pos.epoch)
        if outcome.stopped is not None:
            self._exit_stopped(outcome.stopped, pos)
        return outcome.history

    def _run_stages(self) -> RunStages:
        """The run's stages: which its checkpoints reached (rank 0's records, everywhere)."""
        if self._stages is None:
            dist = self.distributed
            records = cast("list[dict[str, Any]]", dist.broadcast(  # rank 0's, never None
                self.core.checkpoint.stage_checkpoints() if dist.is_chief else None))
            self._stages = RunStages(
                [{k: r[k] for k in ("uuid", "stage") if k in r} for r in records],
                searched=self._searched_stage)
        return self._stages

    def _exit_stopped(self, stop: Preempted, pos: Position) -> None:
        """A stop (signal, preemption) ends the script once its checkpoint is saved."""
        where = f"epoch {pos.epoch}, batch {pos.batch}"
        if self.distributed.is_chief:
            if stop.reason == MASTER_STOP:  # a stop to resume, not the end
                self.core.preempt.acknowledge_preemption_signal()
            saved = f"checkpoint {stop.uuid} saved" if stop.uuid else "no checkpoint saved"
            hint = self.core.resume_hint()
            print(f"det_sdk: stopped by {stop.reason} at {where}; {saved}. {hint}".rstrip(),
                  file=sys.stderr, flush=True)
        self.close()
        raise SystemExit(130 if stop.reason == "SIGINT" else 0)

    def evaluate(
        self, model: Any, x: Any = None, y: Any = None, *, stage: str | None = None,
        **kwargs: Any
    ) -> Any:
        """``model.evaluate`` over all processes, recorded as metrics (group ``evaluation``).

        Each process evaluates its part (full numpy data and whole Sequences are
        shared out here; wrapped views, arrays derived from them and datasets are
        each process's part); then the metrics' states are summed over processes and
        the results read from the sums, so every built-in metric (counts, AUC,
        precision, means) equals that of one process on the whole data.
        Returns what ``model.evaluate`` returns for the same arguments.

        Recorded in the stage that last trained ``model`` (at its position), or, given
        ``stage="name"``, as a stage of its own (at step 0).

        Example::

            loss, acc = context.evaluate(model, x_test, y_test)
            context.evaluate(student, x_test, y_test, stage="student-test")
        """
        want_dict = kwargs.pop("return_dict", False)
        own = self._run_stages().begin("evaluate", stage) if stage is not None else None
        results = self._loop.evaluate_all(model, x, y, **kwargs)
        if self.distributed.is_chief:
            pos = self._loop.peek_position()
            latest, searched = self._latest_stage
            if own is not None:
                name, steps, epoch = own.name, 0, 0
            else:  # the stage that trained the model (else the latest fit's), at its position
                name = self._trained_in.get(model, latest)
                steps, epoch = pos.steps_completed, pos.epoch
                if name != latest:  # another stage's model: where it ended
                    steps, epoch = self._stage_positions.get(name, (steps, epoch))
            self.core.train.report_metrics("evaluation", steps, results, epoch,
                                           stage=name, searched=searched)
        if want_dict:
            return results
        values = _compat.metrics_in_order(model, results)
        return values[0] if len(values) == 1 else values

    def predict(
        self, model: Any, x: Any, *, all_ranks: bool = True,
        output: str | os.PathLike[str] | None = None, **kwargs: Any
    ) -> Any:
        """``model.predict`` across processes: the predictions for the rows of ``x``.

        Each process predicts its shard of ``x`` (as returned by ``wrap_data``; full
        numpy data is sharded here) and the shards are gathered in rank order, so the
        result has exactly the rows of the original data, in order, on every process
        (``all_ranks=False``: on rank 0 only; the others get ``None``). Tensors
        (``tf.constant`` rows) are shared out as numpy arrays are. For a
        ``tf.data.Dataset`` sharded with ``wrap_data`` the rows come back rank by rank;
        a dataset not wrapped, or a generator, is predicted whole by every process and
        returned once (each row once, as on one process; wrap it to share the work).

        ``output="DIR"`` streams instead (docs/batch-inference.md): each process writes
        its batches' predictions to part files in ``DIR`` as it goes (memory flat in the
        number of rows), in the input's order for every data kind; a rerun into the same
        ``DIR`` skips the parts already written. Returns a ``StreamedPredictions``
        summary; read the rows with ``det_sdk.load_predictions(DIR)``.

        Example::

            predictions = context.predict(model, context.wrap_data(x))
            context.predict(model, x, output="predictions", batch_size=4096)
        """
        dist = self.distributed
        if output is not None:  # streamed to part files (det_sdk.keras._predict)
            from det_sdk.keras._predict import predict_to

            return predict_to(dist, self.core, model, x, output, **kwargs)
        if dist.size == 1:
            return model.predict(x, **kwargs)
        x = _data.tensors_as_arrays(x)  # tf.constant rows, as numpy, are shared out
        if not dist.is_chief:
            kwargs["verbose"] = 0
        if not (_data.is_array_data(x) or isinstance(x, _compat.SequenceBase)
                or _data.dataset_sharded_for(x, dist.rank, dist.size)):
            # Neither wrapped nor rows det_sdk can deal out (a whole dataset, a generator):
            # every process predicts all of it and returns it once, as one process would
            # (gathered, it would hold each row N times)
            whole = model.predict(x, **kwargs)
            return whole if all_ranks or dist.is_chief else None
        x, _, _, rows, _ = _data.local_part(dist, x, where="context.predict: x")
        if rows == 0:  # fewer rows than processes: an empty block of the right shape
            probe = _data.slice_rows(_data.full_data(x), 0, 1)
            local = tf.nest.map_structure(lambda a: a[:0], model.predict(probe, verbose=0))
        else:
            local = model.predict(x, **kwargs)
        gathered = tf.nest.map_structure(dist.gather_arrays, local)
        return gathered if all_ranks or dist.is_chief else None

    # --- checkpoints ----------------------------------------------------------------------

    def load_checkpoint_model(
        self,
        trial_id: int | str | None = None,
        checkpoint_uuid: str | None = None,
        *,
        best: bool = False,
        custom_objects: Mapping[str, Any] | None = None,
        model: Any = None,
        stage: str | None = None,
    ) -> Any:
        """A compiled model (architecture, weights, optimizer state) from a checkpoint.

        Either a trial's latest checkpoint (``best=True``: best by the searcher metric)
        or the checkpoint ``checkpoint_uuid``. Locally, ``trial_id`` is a run id. A
        script with several ``fit`` calls (stages, det_sdk.stages) picks one with
        ``stage=`` (the name given to that ``fit``); without it, the latest checkpoint is
        of the stage that checkpointed last (and on the cluster ``best=True`` ranks the
        searched stage's).

        A model Keras has no config of (subclassed, its ``__init__`` taking models or
        other objects, no ``get_config``) is checkpointed by its weights: build it with
        your code and pass it as ``model=``; the checkpoint's weights, lookup tables and
        (if you compiled it) optimizer state are loaded into it and it is returned.
        Without ``model=`` such a checkpoint raises ``WeightsOnlyCheckpointError``
        saying so. A rebuilt model whose class overrides ``compile`` with its own
        signature gets its optimizer only: compile it with your arguments before
        training it further.

        Example::

            model = context.load_checkpoint_model(trial_id=1)
            model = context.load_checkpoint_model(checkpoint_uuid="7c1a...")
            vae = context.load_checkpoint_model(trial_id=1, model=make_vae())
            teacher = context.load_checkpoint_model(trial_id=1, stage="teacher")
        """
        checkpoint_uuid = self._checkpoint_of("load_checkpoint_model", trial_id,
                                              checkpoint_uuid, best, stage)
        path = self.core.checkpoint.checkpoint_path(checkpoint_uuid)
        if model is not None:
            if not isinstance(model, _compat.keras.Model):
                raise ArgumentTypeError("load_checkpoint_model: model must be a keras.Model, got "
                                        f"{type(model).__name__}")
            return _checkpoint.load_into(path, model)
        return _checkpoint.load_model(path, custom_objects)

    def load_checkpoint_weights(
        self,
        model: Any,
        trial_id: int | str | None = None,
        checkpoint_uuid: str | None = None,
        *,
        best: bool = False,
        stage: str | None = None,
    ) -> dict[str, Any]:
        """Restore a checkpoint's weights (and lookup tables) into a model the script built.

        For models Keras cannot rebuild from a config (subclassed models, custom
        layers): build ``model`` as in training (same layers, called once or built),
        then load. Optimizer and random state are not loaded (``fit`` resumes those
        itself). Arguments as in :meth:`load_checkpoint_model`. Returns the
        checkpoint's metadata (epoch, batch, metrics, ...).

        Example::

            model = MyModel(); model(x[:1])
            meta = context.load_checkpoint_weights(model, trial_id=1, best=True)
        """
        if not isinstance(model, _compat.keras.Model):
            raise ArgumentTypeError("load_checkpoint_weights: model must be a keras.Model, got "
                                    f"{type(model).__name__}")
        if not model.built:
            raise UsageError("load_checkpoint_weights: the model has no weights yet; build it "
                             "first (call it on a batch, e.g. model(x[:1]), or model.build)")
        checkpoint_uuid = self._checkpoint_of("load_checkpoint_weights", trial_id,
                                              checkpoint_uuid, best, stage)
        return _checkpoint.load_weights(self.core.checkpoint.checkpoint_path(checkpoint_uuid),
                                        model)

    def _checkpoint_of(self, caller: str, trial_id: int | str | None,
                       checkpoint_uuid: str | None, best: bool, stage: str | None) -> str:
        """The checkpoint the arguments of ``caller`` name."""
        if (trial_id is None) == (checkpoint_uuid is None):
            raise UsageError(f"{caller}: give exactly one of trial_id or checkpoint_uuid")
        if checkpoint_uuid is not None:
            if stage is not None or best:
                raise UsageError(f"{caller}: stage= and best= choose among a trial's "
                                 "checkpoints; give them with trial_id, not checkpoint_uuid")
            return checkpoint_uuid
        if stage is not None:
            check_stage_name(stage)
        # trial_id is not None: exactly one of it and checkpoint_uuid is (checked above)
        return self.core.checkpoint.select(trial_id, best=best, stage=stage)

    def close(self) -> None:
        """Deliver pending records and release the run (``core.close()``)."""
        self.core.close()


def compression_name(compression: Any) -> str | None:
    """``wrap_optimizer``'s ``compression`` as a name: None, ``"fp16"``; Horovod's
    ``Compression.none``/``Compression.fp16`` classes are read by their names.

    >>> compression_name("fp16"), compression_name(None), compression_name("none")
    ('fp16', None, None)
    """
    if compression is None:
        return None
    name = compression if isinstance(compression, str) else getattr(
        compression, "__name__", type(compression).__name__)
    key = name.lower().replace("compressor", "").replace("compression", "").strip("_.")
    if key in ("", "none", "no"):
        return None
    if key in ("fp16", "float16"):
        return "fp16"
    raise ArgumentTypeError(
        f"wrap_optimizer: compression must be None, 'fp16' or Horovod's "
        f"hvd.Compression.none / hvd.Compression.fp16; got {compression!r}")
