"""``torch_batch_process``: shard, process, checkpoint progress, resume, stop when asked.

The dataset's batches (``batch_size`` rows each, in the dataset's order) are the
*global batches* ``0 .. n-1``; process ``r`` of ``size`` takes every ``size``-th one
(``r, r+size, r+2*size, ...``), as Determined's sampler deals them. Every process runs
the same number of steps (the last ones may have no batch), so that they checkpoint
together: after step ``s`` every global batch below ``(s+1)*size`` is done. Progress is
that count, ``global_batches_done``, a prefix of the global batches; a resumed run
(same or another number of processes) takes the batches from there.

An unsized (iterable) dataset is dealt alike: its items, in its order, cut into batches
of ``batch_size``, are the global batches; every process iterates the whole dataset and
keeps its own batches' items (:class:`_Dealt`), a resumed run iterates past the done
prefix. The end is found when a process's iterator is exhausted: the processes learn it
at the next checkpoint (they meet only there), where the run ends.

A checkpoint: every process calls ``on_checkpoint_start``; all meet; the chief stores a
progress checkpoint (through ``core_context.checkpoint``) and then moves the files
staged under ``upload_path()`` into the output directory (:mod:`._outputs`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import uuid as uuidlib
from collections.abc import Iterator, Sized
from pathlib import Path
from typing import TYPE_CHECKING, Any

from det_sdk.engine.signals import catch_stop_signals
from det_sdk.errors import DetSdkError
from det_sdk.pytorch.experimental._context import TorchBatchProcessor, TorchBatchProcessorContext
from det_sdk.pytorch.experimental._outputs import OutputDir

if TYPE_CHECKING:
    from det_sdk.core import Context

__all__ = ["BatchProcessError", "torch_batch_process"]

log = logging.getLogger("det_sdk.pytorch")

KEY = "torch_batch_process"  # the progress record's key in a checkpoint's metadata
PROGRESS_FILE = "progress.json"  # a job's progress record, beside its outputs
_END = object()  # an iterator's end


class BatchProcessError(DetSdkError, ValueError):
    """torch_batch_process was given arguments or a resume it cannot honour."""


def torch_batch_process(
    batch_processor_cls: type[TorchBatchProcessor],
    dataset: Any,
    batch_size: int | None = None,
    max_batches: int | None = None,
    checkpoint_interval: int = 5,
    dataloader_kwargs: dict[str, Any] | None = None,
    distributed_context: Any = None,
) -> None:
    """Run ``batch_processor_cls`` over ``dataset``, sharded, checkpointed and resumable.

    ``dataset``: a map-style dataset (``__len__`` and ``__getitem__``), or an iterable
    one (a ``torch.utils.data.IterableDataset``, any iterable) whose length is unknown;
    ``batch_size`` rows per batch (default 1, or ``dataloader_kwargs["batch_size"]``);
    ``max_batches``: at most this many batches per process (over all runs of the task);
    ``checkpoint_interval``: progress is checkpointed every this many batches per
    process; ``dataloader_kwargs``: for ``torch.utils.data.DataLoader`` (``num_workers``,
    ``collate_fn``, ...; no ``shuffle``, ``sampler`` or ``batch_sampler``);
    ``distributed_context``: the ranks (default: torchrun's or horovodrun's, else one).

    >>> torch_batch_process(MyProcessor, dataset, batch_size=64)  # doctest: +SKIP
    """
    from det_sdk import core

    batch_size, kwargs = _check_args(dataset, batch_size, max_batches, checkpoint_interval,
                                     dataloader_kwargs, batch_processor_cls)
    dist = distributed_context if distributed_context is not None else _default_distributed()
    with core.init(distributed=dist) as core_context:
        _Run(core_context, batch_processor_cls, dataset, batch_size, max_batches,
             checkpoint_interval, kwargs).run()


def _check_args(dataset: Any, batch_size: int | None, max_batches: int | None,
                checkpoint_interval: int, dataloader_kwargs: dict[str, Any] | None,
                cls: Any) -> tuple[int, dict[str, Any]]:
    if not (isinstance(cls, type) and issubclass(cls, TorchBatchProcessor)):
        raise BatchProcessError("torch_batch_process: batch_processor_cls must be a "
                                f"TorchBatchProcessor subclass, got {cls!r}")
    if not _sized(dataset) and not hasattr(dataset, "__iter__"):
        raise BatchProcessError("torch_batch_process: dataset must be a map-style dataset "
                                "(__len__ and __getitem__) or an iterable one (__iter__), "
                                f"got {type(dataset).__name__}")
    kwargs = dict(dataloader_kwargs or {})
    if not _sized(dataset) and kwargs.get("num_workers"):
        # each worker would iterate the whole dataset again: its batches would repeat
        raise BatchProcessError("torch_batch_process: dataloader_kwargs 'num_workers' must "
                                "be 0 with an iterable (unsized) dataset: every process "
                                "iterates it whole to find its batches")
    if kwargs.get("shuffle"):
        raise BatchProcessError("torch_batch_process: dataloader_kwargs 'shuffle' must be "
                                "false: batches are dealt in the dataset's order so that "
                                "progress can be checkpointed")
    kwargs.pop("shuffle", None)
    for name in ("sampler", "batch_sampler"):
        if name in kwargs:
            raise BatchProcessError(f"torch_batch_process: remove dataloader_kwargs {name!r}: "
                                    "torch_batch_process deals the batches itself")
    if "batch_size" in kwargs:
        if batch_size is not None:
            raise BatchProcessError("torch_batch_process: batch_size is given both as an "
                                    "argument and in dataloader_kwargs; give one")
        batch_size = kwargs.pop("batch_size")
    batch_size = 1 if batch_size is None else batch_size
    for name, value in (("batch_size", batch_size), ("checkpoint_interval", checkpoint_interval),
                        ("max_batches", 1 if max_batches is None else max_batches)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BatchProcessError(f"torch_batch_process: {name} must be an int >= 1, "
                                    f"got {value!r}")
    return batch_size, kwargs


def _sized(dataset: Any) -> bool:
    """A map-style dataset: indexed by row. A torch IterableDataset is iterated even when
    it has a ``__len__`` (it has no ``__getitem__`` to index)."""
    import torch.utils.data

    return (isinstance(dataset, Sized) and hasattr(dataset, "__getitem__")
            and not isinstance(dataset, torch.utils.data.IterableDataset))


def _dealt(dataset: Any, batch_size: int, first: int, rank: int, size: int,
           limit: int | None) -> Any:
    """The items of global batches ``first + rank``, ``first + rank + size``, ... of an
    iterable ``dataset`` (below ``limit``), in order: a DataLoader with ``batch_size``
    batches them into exactly those batches (the only short one is the last)."""
    import torch.utils.data

    class _Dealt(torch.utils.data.IterableDataset):
        seen = 0  # items of the dataset iterated so far (all of them, once exhausted)

        def __iter__(self) -> Iterator[Any]:
            for i, item in enumerate(dataset):
                self.seen = i + 1
                g = i // batch_size
                if limit is not None and g >= limit:
                    return
                # the done prefix is iterated past (an iterable cannot be indexed)
                if g >= first and (g - first) % size == rank:
                    yield item

    return _Dealt()


def _default_distributed() -> Any:
    from det_sdk.pytorch._trainer import _distributed

    return _distributed()


def _device(core_context: Context) -> Any:
    from det_sdk.collectives.torch import use_rank_device

    dist = core_context.distributed
    return use_rank_device(int(dist.get_local_rank()), int(dist.get_local_size()))


def _in_job(core_context: Context) -> bool:
    """A generic job on the cluster (``det job run``); a local run is none."""
    return core_context.local_run_dir is None and core_context.info.task_type == "GENERIC"


def _job_record(folder: Path) -> dict[str, Any] | None:
    """The newest progress record under a job's ``torch_batch_process`` folder (its
    working directory outlives a stop or a crash of its process)."""
    records = sorted(folder.glob(f"*/{PROGRESS_FILE}"), key=lambda p: p.stat().st_mtime)
    return json.loads(records[-1].read_text())[KEY] if records else None


def _output_root(core_context: Context, name: str) -> Path:
    """Where this task keeps files: the trial's kept files on the cluster, the job's
    files in a job, the run directory locally (docs/batch-inference.md)."""
    files_dir = core_context.files_dir
    if files_dir is not None:
        return Path(files_dir) / KEY / name
    run_dir = core_context.local_run_dir
    if run_dir is not None:
        return Path(run_dir).resolve() / KEY / name
    info = core_context.info
    storage = ((getattr(info, "config", None) or {}).get("checkpoint_storage") or {})
    if storage.get("host_path") and info is not None:
        return Path(storage["host_path"]) / "job_files" / str(info.allocation_id) / KEY / name
    return Path.cwd().resolve() / KEY / name


class _Run:
    """One run of torch_batch_process on this process."""

    def __init__(self, core_context: Context, cls: type[TorchBatchProcessor], dataset: Any,
                 batch_size: int, max_batches: int | None, interval: int,
                 kwargs: dict[str, Any]) -> None:
        self.core = core_context
        self.dist = core_context.distributed
        self.rank, self.size = int(self.dist.rank), int(self.dist.size)
        self.cls, self.dataset, self.batch_size = cls, dataset, batch_size
        self.interval, self.kwargs = interval, kwargs
        self.sized = _sized(dataset)
        # an iterable dataset's rows are unknown (None), its batches until it has ended
        self.rows: int | None = len(dataset) if self.sized else None
        total = math.ceil(self.rows / batch_size) if self.rows is not None else None
        # max_batches is per process, as in Determined: size * max_batches global batches
        cap = None if max_batches is None else max_batches * self.size
        self.limit: int | None = (total if cap is None else cap if total is None
                                  else min(total, cap))
        self.seen: int | None = None  # an iterable's rows, once it has ended
        self.seq = 0  # progress checkpoints committed (the last one's number)
        self.done = 0  # global batches done (a prefix)
        self.using: list[str] = []

    # -- resuming ------------------------------------------------------------------------
    def _resume(self) -> tuple[dict[str, Any] | None, Path]:
        latest = self.core.info.latest_checkpoint
        record: dict[str, Any] | None = None
        if latest is None and _in_job(self.core):
            # a job launched again (activate, a restart): its progress file, if any
            record = self.dist.broadcast(_job_record(_output_root(self.core, "-").parent)
                                         if self.dist.is_chief else None)
        if latest is not None:
            meta = self.core.checkpoint.get_metadata(latest)
            record = meta.get(KEY)
            if record is None:
                raise BatchProcessError(
                    f"torch_batch_process: checkpoint {latest} (this task's latest) is not a "
                    "torch_batch_process progress checkpoint; start a new run")
        if record is not None:
            if (record["rows"], record["batch_size"]) != (self.rows, self.batch_size):
                def rows(n: int | None) -> str:
                    return "an unsized dataset" if n is None else f"{n} rows"
                raise BatchProcessError(
                    "torch_batch_process: cannot resume: the checkpointed run had "
                    f"{rows(record['rows'])} in batches of {record['batch_size']}, this one "
                    f"has {rows(self.rows)} in batches of {self.batch_size}")
            root = Path(record["output_path"])
        else:
            name = self.dist.broadcast(str(uuidlib.uuid4()) if self.dist.is_chief else None)
            assert name is not None  # the chief's, on every process
            root = _output_root(self.core, name)
        return record, root

    # -- the loop ----------------------------------------------------------------------
    def run(self) -> None:
        record, root = self._resume()
        outputs = OutputDir(root)
        if record is not None:
            self.seq, self.done = int(record["seq"]), int(record["global_batches_done"])
            self.using = list(record.get("using_checkpoints") or [])
            if self.dist.is_chief:
                outputs.recover(committed=self.seq)  # finish or drop what was staged
            self.dist.barrier()
            if record.get("finished"):
                log.info("torch_batch_process: this run finished already (%d batches); "
                         "outputs in %s", self.done, root)
                return
            log.info("torch_batch_process: resuming after %d of %s global batches",
                     self.done, "?" if self.limit is None else self.limit)
        self.context = TorchBatchProcessorContext(self.core, outputs, _device(self.core))
        self.context._seq = self.seq + 1
        self.context._using = self.using
        processor = self.cls(context=self.context)
        with catch_stop_signals() as stop_signal:
            stopped = (self._batches(processor, stop_signal) if self.sized
                       else self._iterated_batches(processor, stop_signal))
        if stopped:
            self._report_reducers()
            return
        processor.on_finish()
        self._checkpoint(finished=True)
        self._report_reducers()
        if self.dist.is_chief:
            self.context._outputs.finish()
        if self.dist.is_chief and self.context._use_default_storage:
            log.info("torch_batch_process: files stored with upload_path() are in %s",
                     outputs.root)

    def _batches(self, processor: TorchBatchProcessor, stop_signal: Any) -> bool:
        """Process this rank's batches from ``self.done`` on; True when asked to stop."""
        assert self.limit is not None  # a sized dataset's
        done0 = self.done
        start_step = done0 // self.size
        steps = math.ceil((self.limit - done0) / self.size) if self.limit > done0 else 0
        it = iter(self._loader(list(range(done0 + self.rank, self.limit, self.size))))
        for k in range(steps):
            g = done0 + self.rank + k * self.size  # this rank's global batch of step k
            if g < self.limit:
                processor.process_batch(batch=next(it), batch_idx=g // self.size)
            last = k == steps - 1
            if (start_step + k + 1) % self.interval == 0 or last:
                processor.on_checkpoint_start()
                # after step k every rank is past it: the global batches below this are done
                done = min(self.limit, done0 + (k + 1) * self.size)
                stop = self._checkpoint(done=done, stop_here=bool(stop_signal()))
                if stop and not last:
                    # a warning: the run is not done, and says how it goes on
                    log.warning("torch_batch_process: stopped after %d of %d global batches "
                                "(progress checkpointed: activated, or run again locally "
                                "with DET_RESUME=latest, it goes on from there)", self.done,
                                self.limit)
                    return True
        return False

    def _iterated_batches(self, processor: TorchBatchProcessor, stop_signal: Any) -> bool:
        """An iterable dataset's batches of this rank from ``self.done`` on (step ``k`` is
        global batch ``done + rank + k * size``, as for a sized one), until it ends or a
        stop is asked; True when stopped. A rank whose batches have ended walks empty
        steps to the next checkpoint, where the ranks learn that the dataset has ended:
        every global batch before the first missing one has been processed, so the
        batches done are the ones done before plus those every rank processed."""
        import torch.utils.data

        done0 = self.done
        start_step = done0 // self.size
        dealt = _dealt(self.dataset, self.batch_size, done0, self.rank, self.size, self.limit)
        it = iter(torch.utils.data.DataLoader(dealt, batch_size=self.batch_size,
                                              **self.kwargs))
        processed, ended, k = 0, False, 0
        while True:
            if not ended:
                batch = next(it, _END)
                if batch is _END:
                    ended = True
                else:
                    g = done0 + self.rank + k * self.size
                    processor.process_batch(batch=batch, batch_idx=g // self.size)
                    processed += 1
            k += 1
            if (start_step + k) % self.interval:
                continue
            processor.on_checkpoint_start()
            states = self.dist.allgather((ended, processed, dealt.seen if ended else None))
            done = done0 + sum(n for _, n, _ in states)
            last = any(e for e, _, _ in states)
            if last:
                self.seen = next(s for e, _, s in states if e)
                # the run's global batches are now known (for the records and messages)
                self.limit = done
            stop = self._checkpoint(done=done, stop_here=bool(stop_signal()))
            if last:
                return False
            if stop:
                log.warning("torch_batch_process: stopped after %d global batches (progress "
                            "checkpointed: activated, or run again locally with "
                            "DET_RESUME=latest, it goes on from there)", self.done)
                return True

    def _loader(self, indices: list[int]) -> Any:
        import torch.utils.data

        assert self.rows is not None  # a sized dataset's
        batches = [list(range(g * self.batch_size, min(self.rows, (g + 1) * self.batch_size)))
                   for g in indices]
        return torch.utils.data.DataLoader(self.dataset, batch_sampler=batches, **self.kwargs)

    def _checkpoint(self, done: int | None = None, stop_here: bool = False,
                    finished: bool = False) -> bool:
        """Meet, store progress, commit the staged files; whether to stop (on every rank)."""
        flags = self.dist.allgather(stop_here)  # also: every rank's files are staged
        if done is not None:
            self.done = done
        seq = self.seq + 1
        if self.dist.is_chief:
            self._store(seq, finished)
            self.context._outputs.commit(seq)
            self._report()
        self.seq = seq
        self.context._seq = seq + 1
        preempt = self.core.preempt.should_preempt() if not finished else False
        return bool(preempt or any(flags))

    def _report(self) -> None:
        """The fraction done (a trial's) and the rows done of the total (a job's: ``det job
        describe``). An iterable dataset's total is unknown (None, no fraction) until it
        has ended."""
        rows, total = self.done * self.batch_size, None
        if self.rows is not None:
            assert self.limit is not None  # known with the rows
            if self.core.run_id is not None:
                self.core.train.report_progress(self.done / self.limit if self.limit else 1.0)
            rows, total = min(self.rows, rows), min(self.rows, self.limit * self.batch_size)
        elif self.seen is not None:  # an iterable dataset that has ended
            rows = total = min(rows, self.seen)
        self.core.train.report_rows(rows, total, str(self.context._outputs.root))

    def _store(self, seq: int, finished: bool) -> None:
        per_rank = math.ceil(self.done / self.size)
        record = {"seq": seq, "global_batches_done": self.done, "global_batches": self.limit,
                  "rows": self.rows, "batch_size": self.batch_size, "processes": self.size,
                  "output_path": str(self.context._outputs.root), "finished": finished,
                  "using_checkpoints": list(self.context._using)}
        meta = {"steps_completed": per_rank, KEY: record,
                "default_output_uuid": self.context._outputs.root.name}
        if self.core.run_id is None:
            # a generic job (`det job run`): the master keeps no checkpoints for jobs (nor
            # restarts them); the progress record is a file beside the outputs
            root = self.context._outputs.root
            root.mkdir(parents=True, exist_ok=True)
            tmp = root / f".{PROGRESS_FILE}.tmp"
            tmp.write_text(json.dumps(meta))
            os.replace(tmp, root / PROGRESS_FILE)
            return
        with self.core.checkpoint.store_path(meta) as (path, _uuid):
            # Determined's file, for scripts that read it
            (path / "batch_completed.json").write_text(json.dumps({"batch_completed": per_rank}))

    def _report_reducers(self) -> None:
        reducers = self.context._reducers
        if not reducers:
            return
        mine = {name: r.per_slot_reduce() for name, r in reducers.items()}
        gathered = self.dist.allgather(mine)
        if self.dist.is_chief:
            metrics = {name: r.cross_slot_reduce([g[name] for g in gathered])
                       for name, r in reducers.items()}
            self.core.train.report_validation_metrics(
                steps_completed=math.ceil(self.done / self.size), metrics=metrics)
