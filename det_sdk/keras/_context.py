"""``KerasContext``: what ``det.keras.init()`` returns, and the API a training script uses."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from det_sdk.config import Length
from det_sdk.distributed import DistributedContext
from det_sdk.hparams import HParams
from det_sdk.info import ClusterInfo
from det_sdk.keras import _checkpoint, _data, _fit
from det_sdk.keras._callbacks import Position
from det_sdk.session import Session

__all__ = ["KerasContext", "TrainingContext"]


def _trains_only(optimizer: Any, model: tf.keras.Model) -> bool:
    """True if ``optimizer`` has been built, for variables of ``model`` only."""
    built_for = getattr(optimizer, "_index_dict", None)
    if not getattr(optimizer, "_built", False) or not built_for:
        return False
    own = {optimizer._var_key(v) for v in model.trainable_variables}
    return set(built_for) <= own


def _weighted_mean(parts: list[tuple[dict[str, float], int]]) -> dict[str, float]:
    """Mean of per-process metric dicts, weighted by each process's sample count."""
    total = sum(n for _, n in parts if n)
    keys = next((list(m) for m, n in parts if m), [])
    return {k: sum(float(m[k]) * n for m, n in parts if n and m) / total for k in keys}

_OPTIMIZER_TYPES = (tf.keras.optimizers.Optimizer, tf.keras.optimizers.legacy.Optimizer)


class TrainingContext:
    """What only a training task has: its hyperparameters.

    >>> TrainingContext(HParams({"dropout": 0.5})).hparams["dropout"]
    0.5
    """

    def __init__(self, hparams: HParams) -> None:
        self.hparams = hparams


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
        distributed: DistributedContext,
        session: Session,
        hparams: HParams | None,
        config_data: Mapping[str, Any],
        seed: int,
        checkpoint_period: Length | None,
        info: ClusterInfo | None = None,
        validation_period: Length | None = None,
        report_every: int | None = None,
        searcher_metric: str = "val_loss",
        max_length: Length | None = None,
    ) -> None:
        self.distributed = distributed
        self.session = session
        self.config_data: dict[str, Any] = dict(config_data)
        self.seed = seed
        self.checkpoint_period = checkpoint_period
        self.info = info
        self.validation_period = validation_period  # the config's min_validation_period
        self.report_every = report_every  # batches between training-metric reports
        self.searcher_metric = searcher_metric
        self.max_length = max_length  # the searcher's full length, for progress
        self._training = TrainingContext(hparams) if hparams is not None else None
        self._optimizers: list[Any] = []  # as wrapped, in the order wrapped
        self._given: dict[int, Any] = {}  # id(wrapped) -> the optimizer the user built
        # The checkpoint a resumed run continues from: the first fit consumes it; a
        # later fit in the same process trains its model afresh.
        self._resume_uuid: str | None = session.latest_checkpoint
        self._position: Position | None = None  # where the latest fit got to

    # --- hyperparameters ------------------------------------------------------------------

    @property
    def training(self) -> TrainingContext:
        """The training side of the context (``context.training.hparams``).

        Raises ``RuntimeError`` in a generic job (``det job run``), which does not train.
        """
        if self._training is None:
            raise RuntimeError(
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

        >>> x, y = context.wrap_data(x, y)            # numpy (or lists/dicts of arrays)
        >>> x, y, w = context.wrap_data(x, y, w)      # with sample weights
        >>> seq = context.wrap_data(seq)              # keras.utils.Sequence
        >>> ds = context.wrap_data(ds)                # tf.data.Dataset: ds.shard()
        """
        return _data.wrap_data(self.distributed, x, y, sample_weight)

    def wrap_optimizer(self, optimizer: Any) -> Any:
        """Track ``optimizer`` so its state is checkpointed; distribute it when needed.

        Wrap each optimizer of a multi-optimizer model.

        >>> opt = context.wrap_optimizer(keras.optimizers.SGD(0.01))
        """
        if not isinstance(optimizer, _OPTIMIZER_TYPES):
            raise TypeError(
                "wrap_optimizer: expected a keras optimizer instance, got "
                f"{type(optimizer).__name__}"
            )
        wrapped = self.distributed.distributed_optimizer(optimizer)
        self._optimizers.append(wrapped)
        self._given[id(wrapped)] = optimizer
        return wrapped

    # --- training -------------------------------------------------------------------------

    def fit(self, model: tf.keras.Model, *args: Any, **kwargs: Any) -> tf.keras.callbacks.History:
        """Train ``model`` as ``model.fit`` would, with checkpoints, metrics and resumption.

        Takes what ``model.fit`` takes, plus the proposal's ``x_val``/``y_val``.
        Validation data is required. Off the cluster ``epochs`` and ``initial_epoch``
        are honoured; a resumed run starts from its latest checkpoint. Returns the
        Keras ``History``.

        >>> hist = context.fit(model, x=x, y=y, batch_size=32, epochs=3,
        ...                    validation_data=(x_val, y_val))
        >>> hist.history["val_loss"][-1]
        """
        names = ("x", "y", "batch_size", "epochs")
        if len(args) > len(names):
            raise TypeError("context.fit: pass arguments after epochs by keyword")
        for name, value in zip(names, args):
            if name in kwargs:
                raise TypeError(f"context.fit: got two values for {name!r}")
            kwargs[name] = value
        return _fit.fit(self, model, **kwargs)

    def evaluate(
        self, model: tf.keras.Model, x: Any = None, y: Any = None, **kwargs: Any
    ) -> Any:
        """``model.evaluate`` over all processes, recorded as metrics (group ``evaluation``).

        Each process evaluates its shard (numpy data is sharded here if it was not
        wrapped); the results are averaged weighted by each shard's sample count, so
        mean metrics (loss, accuracy) equal those of one process on the whole data.
        Returns what ``model.evaluate`` returns for the same arguments.

        >>> loss, acc = context.evaluate(model, x_test, y_test)
        """
        want_dict = kwargs.pop("return_dict", False)
        results = self._evaluate_all(model, x, y, **kwargs)
        if self.distributed.is_chief:
            pos = self._position or Position(**(self._resume_position() or
                                                 {"epoch": 0, "batch": 0, "steps_completed": 0}))
            self.session.report_metrics("evaluation", pos.steps_completed, pos.epoch, results)
        if want_dict:
            return results
        values = list(results.values())
        return values[0] if len(values) == 1 else values

    def predict(
        self, model: tf.keras.Model, x: Any, *, all_ranks: bool = True, **kwargs: Any
    ) -> Any:
        """``model.predict`` across processes: the predictions for the rows of ``x``.

        Each process predicts its shard of ``x`` (as returned by ``wrap_data``; full
        numpy data is sharded here) and the shards are gathered in rank order, so the
        result has exactly the rows of the original data, in order, on every process
        (``all_ranks=False``: on rank 0 only; the others get ``None``). For a
        ``tf.data.Dataset`` sharded with ``wrap_data`` the rows come back rank by rank.

        >>> predictions = context.predict(model, context.wrap_data(x))
        """
        dist = self.distributed
        if dist.size == 1:
            return model.predict(x, **kwargs)
        x, _, _, rows, _ = _data.local_part(dist, x)
        if not dist.is_chief:
            kwargs["verbose"] = 0
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
    ) -> tf.keras.Model:
        """A compiled model (architecture, weights, optimizer state) from a checkpoint.

        Either a trial's latest checkpoint (``best=True``: best by the searcher metric)
        or the checkpoint ``checkpoint_uuid``. Locally, ``trial_id`` is a run id.

        >>> model = context.load_checkpoint_model(trial_id=1)
        >>> model = context.load_checkpoint_model(checkpoint_uuid="7c1a...")
        """
        if (trial_id is None) == (checkpoint_uuid is None):
            raise ValueError("load_checkpoint_model: give exactly one of trial_id or "
                             "checkpoint_uuid")
        if checkpoint_uuid is None:
            checkpoint_uuid = self.session.checkpoint_for_trial(trial_id, best=best)  # type: ignore[arg-type]
        path = self.session.checkpoint_path(checkpoint_uuid)
        return _checkpoint.load_model(path, custom_objects)

    def close(self) -> None:
        """Deliver pending records and release the session."""
        self.session.close()

    # --- used by fit ----------------------------------------------------------------------

    def _evaluate_all(self, model: tf.keras.Model, x: Any, y: Any = None,
                      **kwargs: Any) -> dict[str, float]:
        """``model.evaluate`` of every process's part, weighted by sample counts; no records."""
        x, y, sw, rows, _ = _data.local_part(
            self.distributed, x, y, kwargs.pop("sample_weight", None)
        )
        if self.distributed.size > 1 and not self.distributed.is_chief:
            kwargs["verbose"] = 0
        local = (
            model.evaluate(x, y, sample_weight=sw, return_dict=True, **kwargs)
            if rows != 0 else {}
        )
        if self.distributed.size == 1:
            return local
        return _weighted_mean(self.distributed.allgather((local, rows or 0)))

    def _tracked_optimizers(self, model: tf.keras.Model) -> list[Any]:
        """The optimizers whose state a checkpoint holds: the model's first, then the
        other wrapped ones that train this model's variables (another model's
        optimizer, or one not used yet, is not this model's state)."""
        extra = [o for o in self._optimizers
                 if o is not model.optimizer and _trains_only(o, model)]
        return [model.optimizer, *extra]

    def _resume_position(self) -> dict[str, int] | None:
        uuid = self._resume_uuid
        if uuid is None:
            return None
        meta = _checkpoint.read_metadata(self.session.checkpoint_path(uuid))
        return {k: int(meta[k]) for k in ("epoch", "batch", "steps_completed")}

    def _restore_latest(self, model: tf.keras.Model) -> Any:
        uuid = self._resume_uuid

        def restore() -> None:
            if uuid is not None:
                path = self.session.checkpoint_path(uuid)
                _checkpoint.restore_state(
                    path, model, self._tracked_optimizers(model), rank=self.distributed.rank
                )

        return restore

    def _broadcast_state(self, model: tf.keras.Model) -> None:
        """Make every process start from rank 0's weights and optimizer state."""
        variables = list(model.variables)
        for opt in self._tracked_optimizers(model):
            variables += _checkpoint.optimizer_variables(opt, model)
        self.distributed.broadcast_variables(variables)

    def _save_checkpoint(
        self, model: tf.keras.Model, position: Position, metrics: Mapping[str, float]
    ) -> str | None:
        # Collective: every process calls this at the same point of training.
        rng_states = self.distributed.allgather(_checkpoint.rng_state(model))
        if not self.distributed.is_chief:
            return None
        opts = self._tracked_optimizers(model)
        metadata = {
            **position.as_dict(),
            "seed": self.seed,
            "hparams": self._training.hparams.to_dict() if self._training else {},
            "metrics": dict(metrics),
            "trial_id": self.session.trial_id,
            "processes": self.distributed.size,
            "created": time.time(),
        }
        with self.session.storage.store() as (uuid, path):
            size = _checkpoint.save_checkpoint(
                path, model, opts, metadata, rng_states=rng_states,
                plain_optimizer=self._given.get(id(opts[0]), opts[0]),
            )
        self.session.report_checkpoint(
            uuid, {**position.as_dict(), "metrics": dict(metrics), "size": size}
        )
        return uuid
