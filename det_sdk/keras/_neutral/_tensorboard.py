"""TensorBoard scalars of the JAX and PyTorch engine, as the TensorFlow engine writes them:
``<run>/tensorboard/train`` and ``.../validation``, one event per epoch, the step being the
batches trained, ``val_`` dropped from validation's names.

Written with the ``tensorboard`` package's protocol buffers and record writer, which
import no TensorFlow (its ``SummaryWriter`` does); where ``tensorboard`` is not installed
no files are written, and the run says so once.

>>> import tempfile
>>> d = Path(tempfile.mkdtemp())
>>> board = EpochScalars(d)
>>> board.add(13, {"loss": 0.5, "val_loss": 0.7})
>>> sorted(p.name for p in d.iterdir())
['train', 'validation']
>>> board.close()
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["EpochScalars"]

log = logging.getLogger("det_sdk.keras")
_files = itertools.count()


class _EventFile:
    """One event file of scalar events."""

    def __init__(self, logdir: Path) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.record_writer import RecordWriter

        self._event_pb2, self._summary_pb2 = event_pb2, summary_pb2
        logdir.mkdir(parents=True, exist_ok=True)
        name = (f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}."
                f"{os.getpid()}.{next(_files)}.v2")
        self._file = open(logdir / name, "wb")  # noqa: SIM115 (closed by close())
        self._records = RecordWriter(self._file)
        self._append(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))

    def _append(self, event: Any) -> None:
        self._records.write(event.SerializeToString())
        self._file.flush()

    def add(self, step: int, scalars: Mapping[str, float]) -> None:
        pb = self._summary_pb2
        values = [pb.Summary.Value(tag=tag, simple_value=float(v)) for tag, v in scalars.items()]
        self._append(self._event_pb2.Event(wall_time=time.time(), step=step,
                                           summary=pb.Summary(value=values)))

    def close(self) -> None:
        self._file.close()


class EpochScalars:
    """Each epoch's metrics into ``logdir``'s ``train`` and ``validation`` event files."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self._files: dict[str, _EventFile] = {}
        self._off = False

    def add(self, step: int, metrics: Mapping[str, float]) -> None:
        """One epoch's training and validation metrics at ``step`` batches."""
        if self._off:
            return
        train = {k: v for k, v in metrics.items() if not k.startswith("val_")}
        val = {k.removeprefix("val_"): v for k, v in metrics.items() if k.startswith("val_")}
        for name, scalars in (("train", train), ("validation", val)):
            if not scalars:
                continue
            if name not in self._files:
                try:
                    self._files[name] = _EventFile(self.logdir / name)
                except ImportError:
                    self._off = True
                    log.info("det_sdk: no TensorBoard files (pip install tensorboard for them)")
                    return
            self._files[name].add(step, scalars)

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
