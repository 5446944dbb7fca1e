"""What a fit records: the run's History, metrics and progress reported to det.core,
TensorBoard scalars. Each reads where training is from the :class:`FitRun`."""

from __future__ import annotations

import itertools
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tensorflow as tf

from det_sdk.core._train import TrainContext
from det_sdk.distributed import Processes
from det_sdk.keras._callbacks._base import DetCallback
from det_sdk.keras._fit_run import FitRun
from det_sdk.stages import DEFAULT_STAGE

__all__ = ["MetricsReporter", "RecordHistory", "ScalarEventFile", "TensorBoardScalars",
           "split_logs"]


class RecordHistory(DetCallback):
    """Append every epoch end's logs to the run's one ``History`` (``run.history``).

    ``context.fit`` makes several ``model.fit`` calls (planned mid-epoch ends,
    searcher lengths) and resumes from checkpoints: this one record, saved with
    every checkpoint and restored with it, is what ``fit`` returns, so
    ``hist.history["val_loss"][-1]`` is there after any resume, as in an
    uninterrupted run.

    >>> cb = RecordHistory(FitRun(None, None, checkpoints=False))
    """

    def __init__(self, run: FitRun) -> None:
        super().__init__()
        self.run = run

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.run.record_epoch(epoch, logs)


def split_logs(logs: Mapping[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    """Keras epoch logs -> (training metrics, validation metrics)."""
    train: dict[str, float] = {}
    val: dict[str, float] = {}
    for k, v in logs.items():
        try:
            value = float(v)
        except (TypeError, ValueError):
            continue
        (val if k.startswith("val_") else train)[k] = value
    return train, val


class MetricsReporter(DetCallback):
    """Report training and validation metrics, and progress, through ``det.core``'s
    ``train`` context, as those of ``stage`` (det_sdk.stages; ``searched``: the stage the
    searcher's length applies to, whose progress is the trial's).

    At each epoch end (or early end of a call): the epoch's training averages and
    any validation. Every ``report_every`` batches in between: the running
    averages of the epoch so far, averaged over all processes (a collective, so
    every process runs this callback; only the one with ``publish`` reports).
    Each validation goes to ``run`` (``run.validated``), on every process.

    >>> # MetricsReporter(core.train, run, dist, publish=dist.is_chief), from context.fit
    """

    def __init__(self, train: TrainContext, run: FitRun, dist: Processes,
                 *, publish: bool = True, report_every: int | None = None,
                 total_steps: int | None = None, stage: str = DEFAULT_STAGE,
                 searched: bool = True) -> None:
        super().__init__()
        self.train = train
        self.stage, self.searched = stage, searched
        self.run = run
        self.dist = dist
        self.publish = publish
        self.report_every = report_every
        self.total_steps = total_steps

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        steps = self.run.steps_completed
        if not self.report_every or steps % self.report_every or not logs:
            return
        train, _ = split_logs(logs)  # converting the logs waits for this batch: rare
        if self.dist.size > 1:
            parts = self.dist.allgather(train)
            train = {k: sum(p[k] for p in parts) / len(parts) for k in train}
        if self.publish and train:
            self.report("training", steps, train)
            self._progress()

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        train, val = split_logs(logs or {})
        steps = self.run.steps_completed
        if val:
            self.run.validated(val)
        if not self.publish:
            return
        if train:
            self.report("training", steps, train)
        if val:
            self.report("validation", steps, val)
        self._progress()

    def report(self, group: str, steps: int, metrics: Mapping[str, float]) -> None:
        """Report ``metrics`` of ``group`` at ``steps``, in this epoch, as this stage's."""
        self.train.report_metrics(group, steps, metrics, self.run.epoch,
                                  stage=self.stage, searched=self.searched)

    def _progress(self) -> None:
        if self.total_steps:
            self.train.report_progress(self.run.steps_completed / self.total_steps,
                                       searched=self.searched)


class ScalarEventFile:
    """A TensorBoard event file of scalars, written record by record without TF ops.

    ``tf.summary.write`` runs eager ops (a writer resource, a constant, the write)
    and cost about 3.5 ms per epoch here; an ``Event`` protocol buffer appended
    through ``tf.io.TFRecordWriter`` (C++, no graph, no ops) costs tens of
    microseconds and gives TensorBoard the same records. The ``tensorboard``
    package, which TF >= 2.16 no longer installs, is not needed.

    >>> # f = ScalarEventFile(Path("det-runs/1/tensorboard/train")); f.add(64, {"loss": 0.3})
    """

    def __init__(self, logdir: Path) -> None:
        from tensorflow.core.framework import summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
        from tensorflow.core.util import event_pb2

        self._summary_pb2, self._event_pb2 = summary_pb2, event_pb2
        self._tensor_pb2, self._float32 = tensor_pb2, types_pb2.DT_FLOAT
        self._scalar_shape = tensor_shape_pb2.TensorShapeProto()
        self._metadata = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
            data_class=summary_pb2.DATA_CLASS_SCALAR,
        )
        logdir.mkdir(parents=True, exist_ok=True)
        # TensorBoard reads any file whose name holds "tfevents"; this is its own pattern
        name = (f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}."
                f"{os.getpid()}.{next(_event_files)}.v2")
        self._records = tf.io.TFRecordWriter(str(logdir / name))
        self._append(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))

    def _append(self, event: Any) -> None:
        self._records.write(event.SerializeToString())

    def add(self, step: int, scalars: Mapping[str, float]) -> None:
        """Append one event with these scalars at ``step`` and flush it to the file."""
        pb = self._summary_pb2
        # a scalar float32 TensorProto built directly: tf.make_tensor_proto (numpy and
        # type checks) cost 15 us a value, a third of the whole record
        values = [
            pb.Summary.Value(tag=tag, metadata=self._metadata, tensor=self._tensor_pb2.TensorProto(
                dtype=self._float32, tensor_shape=self._scalar_shape, float_val=[float(value)]))
            for tag, value in scalars.items()
        ]
        self._append(self._event_pb2.Event(wall_time=time.time(), step=step,
                                           summary=pb.Summary(value=values)))
        self._records.flush()

    def close(self) -> None:
        self._records.close()


_event_files = itertools.count()


class TensorBoardScalars(DetCallback):
    """Write each epoch's metrics as TensorBoard scalars (step = batches trained).

    Lighter than ``keras.callbacks.TensorBoard``: no graph, no histograms, one
    record per epoch.

    >>> # TensorBoardScalars(Path("det-runs/1/tensorboard"), run)
    """

    def __init__(self, logdir: Path, run: FitRun) -> None:
        super().__init__()
        self.logdir = logdir
        self.run = run
        self._files: dict[str, ScalarEventFile] = {}

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        train, val = split_logs(logs or {})
        for name, metrics in (("train", train), ("validation", val)):
            if not metrics:
                continue
            if name not in self._files:
                self._files[name] = ScalarEventFile(self.logdir / name)
            self._files[name].add(self.run.steps_completed,
                                  {k.removeprefix("val_"): v for k, v in metrics.items()})

    def on_train_end(self, logs: Any = None) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
