"""The profiler: system metrics and per-batch timings of a training process, sampled off
the training thread and reported in batches through the session (Determined 0.38's
``core/_profiler.py``, its metric groups and shapes).

A :class:`SystemSampler` thread samples CPU, memory, disk and network with psutil and,
where NVML (``nvidia-ml-py``) is installed and a GPU is visible, each GPU's utilisation
and memory; every ``samples_per_report`` samples it averages them and hands one record
per group to ``report`` (the session's ``report_system_metrics``: the master's
background queue, or the local run's ``system.jsonl``). The groups and their metrics are
Determined's, each under the host's name (its agent id)::

    cpu      {host: {cpu_util_simple, process_cpu_util*}}
    memory   {host: {memory_free, process_rss*}}              bytes
    disk     {host: {disk_iops, disk_throughput_read, disk_throughput_write,
                     "/": {disk_util}}}                       per second, percent
    network  {host: {net_throughput_sent, net_throughput_recv}}   bytes a second
    gpu      {host: {<GPU UUID>: {gpu_util, gpu_free_memory, gpu_memory_used*}}}
    timings* {host: {data_wait_s, step_s, checkpoint_blocked_s, batches}}

(``*``: det_sdk's additions.) ``timings`` are what the training loop tells the
:class:`BatchTimer` (the Keras engine and the PyTorch Trainer): the mean seconds a batch
waited for its data and took to step, and the seconds checkpoints held training up, over
the batches in ``profiling.begin_on_batch .. end_after_batch``.

Memory is bounded: the samples of one report (``samples_per_report`` at most) and the
session's queue, which keeps at most a few hundred system reports (it drops and counts
the rest while the master is away). Training never waits for the sampler: the timer's
calls are a clock read and a few additions.

>>> got = []
>>> s = SystemSampler(got.extend, Rate(interval_s=60, samples_per_report=10), host="h")
>>> s.start()
>>> s.stop()   # one sample at start, one at stop: a short run still reports
>>> sorted({r["group"] for r in got})
['cpu', 'disk', 'memory', 'network']
>>> [r for r in got if r["group"] == "memory"][0]["metrics"]["h"]["process_rss"] > 0
True
"""

from __future__ import annotations

import importlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_RATE",
    "ENABLED_RATE",
    "SYSTEM_GROUPS",
    "BatchTimer",
    "Rate",
    "SystemSampler",
    "average",
    "start_profiler",
]

log = logging.getLogger("det_sdk.profiler")

#: the groups the profiler reports (Determined's five, and det_sdk's timings)
SYSTEM_GROUPS = ("gpu", "cpu", "memory", "disk", "network", "timings")

Report = Callable[[list[dict[str, Any]]], None]


@dataclass(frozen=True)
class Rate:
    """How often the sampler samples, and how many samples one report averages."""

    interval_s: float
    samples_per_report: int


#: ``profiling`` not set: a low rate (a sample every 10 s, a report a minute)
DEFAULT_RATE = Rate(interval_s=10.0, samples_per_report=6)
#: ``profiling: {enabled: true}``: Determined's rate (every second, 10 a report)
ENABLED_RATE = Rate(interval_s=1.0, samples_per_report=10)


def average(samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The mean of each metric over ``samples``, nested mappings (a GPU's, a disk's) by
    key; a metric missing from some samples is the mean of those that have it.

    >>> average([{"a": 1.0, "g": {"u": 2.0}}, {"a": 3.0, "g": {"u": 4.0}}])
    {'a': 2.0, 'g': {'u': 3.0}}
    >>> average([])
    {}
    """
    sums: dict[str, Any] = {}
    counts: dict[str, Any] = {}
    for sample in samples:
        for key, value in sample.items():
            if isinstance(value, Mapping):
                inner, n = sums.setdefault(key, {}), counts.setdefault(key, {})
                for k, v in value.items():
                    inner[k] = inner.get(k, 0.0) + float(v)
                    n[k] = n.get(k, 0) + 1
            else:
                sums[key] = sums.get(key, 0.0) + float(value)
                counts[key] = counts.get(key, 0) + 1
    return {key: ({k: v / counts[key][k] for k, v in value.items()}
                  if isinstance(value, dict) else value / counts[key])
            for key, value in sums.items()}


class _Rates:
    """Per-second rates of counters between two samples (disk and network I/O)."""

    def __init__(self) -> None:
        self._last: tuple[float, dict[str, float]] | None = None

    def rates(self, counters: Mapping[str, float]) -> dict[str, float] | None:
        now = time.monotonic()
        last, self._last = self._last, (now, dict(counters))
        if last is None or now <= last[0]:
            return None  # the first sample: no interval yet
        dt = now - last[0]
        return {k: max(v - last[1].get(k, v), 0.0) / dt for k, v in counters.items()}


class _Nvml:
    """Each visible GPU's utilisation and memory through NVML (``pynvml``, from
    ``nvidia-ml-py``), or nothing: no module, no driver or no GPU are all "no GPU"."""

    def __init__(self, module: Any = None) -> None:
        self.handles: dict[str, Any] = {}
        nvml = module
        if nvml is None:
            try:  # nvidia-ml-py (det_sdk[gpu]): optional, and untyped
                nvml = importlib.import_module("pynvml")
            except ImportError:
                return
        self.nvml = nvml
        visible = _visible_devices()
        try:
            nvml.nvmlInit()
            for i in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
                raw = nvml.nvmlDeviceGetUUID(handle)
                uuid = raw.decode() if isinstance(raw, bytes) else str(raw)
                # NVML sees every GPU of the machine: keep the ones this process was given
                if visible is not None and str(i) not in visible \
                        and not any(uuid.startswith(v) for v in visible if v.startswith("GPU-")):
                    continue
                nvml.nvmlDeviceGetMemoryInfo(handle)  # each call once: one failing, none
                nvml.nvmlDeviceGetUtilizationRates(handle)
                self.handles[uuid] = handle
        except Exception as err:  # NVMLError and its kin: the driver is not usable here
            log.info("det_sdk: NVML unavailable (%s); no GPU metrics", err)
            self.handles = {}

    def sample(self) -> dict[str, dict[str, float]]:
        out = {}
        for uuid, handle in self.handles.items():
            mem = self.nvml.nvmlDeviceGetMemoryInfo(handle)
            out[uuid] = {"gpu_util": float(self.nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
                         "gpu_free_memory": float(mem.free), "gpu_memory_used": float(mem.used)}
        return out


class BatchTimer:
    """Per-batch timings the training loop records (cheap: a clock read and an addition
    per call); the sampler reports their means with its next report.

    A batch is ``batch_start()`` (its data asked for), ``data_ready()`` (it arrived:
    the PyTorch Trainer, whose loop fetches it) and ``step_end()``. A loop that cannot
    tell the data's arrival apart (Keras fetches inside its compiled step) skips
    ``data_ready``: its ``step_s`` then includes the wait, and no ``data_wait_s`` is
    reported. Batches are counted from 1 at ``step_end``; those outside
    ``begin_on_batch .. end_after_batch`` are not timed. ``sync_timings`` (the config's):
    the loop may set ``sync`` to a callable that waits for the device's queued work
    before a step's time ends (the PyTorch Trainer sets ``torch.cuda.synchronize`` on a
    GPU); None: nothing to wait for.

    >>> t = BatchTimer(begin_on_batch=2)
    >>> for _ in range(3):
    ...     t.batch_start(); t.data_ready(); t.step_end()
    >>> t.checkpoint_blocked(0.5)
    >>> s = t.take()
    >>> s["batches"], s["checkpoint_blocked_s"], "data_wait_s" in s
    (2.0, 0.5, True)
    >>> t.take() is None  # nothing since
    True
    >>> t.batch_start(); t.step_end()  # no data_ready: the wait is in the step
    >>> sorted(t.take())
    ['batches', 'checkpoint_blocked_s', 'step_s']
    >>> t.step_end(); t.take() is None  # no batch_start: counted, not timed
    True
    """

    def __init__(self, begin_on_batch: int = 0, end_after_batch: int | None = None,
                 sync_timings: bool = True) -> None:
        self.begin, self.end, self.sync_timings = begin_on_batch, end_after_batch, sync_timings
        self.sync: Callable[[], Any] | None = None
        self.batch = 0  # batches stepped in this process
        self._t0: float | None = None  # None: no batch_start since the last step_end
        self._t1: float | None = None
        self._lock = threading.Lock()  # take() runs on the sampler thread
        self._reset()

    def _reset(self) -> None:
        self._n, self._waited, self._wait, self._step, self._blocked = 0, 0, 0.0, 0.0, 0.0

    def batch_start(self) -> None:
        """A batch begins: its data is asked for now."""
        self._t0, self._t1 = time.perf_counter(), None

    def data_ready(self) -> None:
        """The batch's data arrived: the step begins."""
        self._t1 = time.perf_counter()

    def step_end(self) -> None:
        """The batch's step (forward, backward, update) ended."""
        self.batch += 1
        t0, t1, self._t0 = self._t0, self._t1, None
        if t0 is None or self.batch < self.begin or (self.end is not None
                                                     and self.batch > self.end):
            return  # outside the window, or a loop that never said when the batch began
        if self.sync is not None:
            self.sync()
        now = time.perf_counter()
        with self._lock:
            self._n += 1
            if t1 is None:
                self._step += now - t0
            else:
                self._waited += 1
                self._wait += t1 - t0
                self._step += now - t1

    def checkpoint_blocked(self, seconds: float) -> None:
        """Training waited ``seconds`` for a checkpoint (its snapshot or its write)."""
        with self._lock:
            self._blocked += float(seconds)

    def take(self) -> dict[str, float] | None:
        """The timings since the last take, and start anew; None: nothing was timed."""
        with self._lock:
            n, waited, wait, step, blocked = (self._n, self._waited, self._wait, self._step,
                                              self._blocked)
            self._reset()
        if not n and not blocked:
            return None
        out = {"step_s": step / n if n else 0.0, "checkpoint_blocked_s": blocked,
               "batches": float(n)}
        if waited:
            out["data_wait_s"] = wait / waited
        return out


class SystemSampler:
    """The sampler thread: samples every ``rate.interval_s`` seconds, and reports the
    mean of each group every ``rate.samples_per_report`` samples; one sample at start and
    one at stop, so that even a run shorter than the interval reports.

    ``nvml``: an NVML module to use instead of importing ``pynvml`` (tests give a double).
    ``report`` is called on the sampler thread (and by ``stop``); it must not block
    for long (the session's queues it).
    """

    def __init__(self, report: Report, rate: Rate, *, host: str | None = None,
                 timer: BatchTimer | None = None, nvml: Any = None) -> None:
        import psutil  # here, not at import: `import det_sdk` stays light

        self._psutil = psutil
        self.report, self.rate, self.timer = report, rate, timer
        self.host = host or socket.gethostname()
        self._process = psutil.Process(os.getpid())
        self._process.cpu_percent(None)  # the first call starts the interval it measures
        psutil.cpu_percent(None)
        self._disk, self._net = _Rates(), _Rates()
        self._nvml = _Nvml(nvml) if nvml is not None or _nvml_wanted() else None
        self._samples: dict[str, list[dict[str, Any]]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # stop's final sample against the thread's last

    def start(self) -> None:
        self.sample()
        self._thread = threading.Thread(target=self._run, daemon=True, name="det-profiler")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.rate.interval_s):
            try:
                self.sample()
                if len(self._samples.get("cpu", ())) >= self.rate.samples_per_report:
                    self.flush()
            except Exception:  # never the training's problem: log and go on
                log.exception("det_sdk: a system metrics sample failed")

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread, take a last sample and report what is pending."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        try:
            self.sample()
            self.flush()
        except Exception:
            log.exception("det_sdk: the last system metrics sample failed")

    def sample(self) -> None:
        """Sample every group once (kept until the next :meth:`flush`)."""
        ps = self._psutil
        with self._lock:
            proc = self._process
            got: dict[str, dict[str, Any]] = {
                "cpu": {"cpu_util_simple": ps.cpu_percent(None),
                        "process_cpu_util": proc.cpu_percent(None)},
                "memory": {"memory_free": float(ps.virtual_memory().available),
                           "process_rss": float(proc.memory_info().rss)},
            }
            io = ps.disk_io_counters()
            disk = self._disk.rates({"read": io.read_bytes, "write": io.write_bytes,
                                     "ops": io.read_count + io.write_count}) if io else None
            usage = {"/": {"disk_util": ps.disk_usage("/").percent}}
            got["disk"] = ({"disk_iops": disk["ops"], "disk_throughput_read": disk["read"],
                            "disk_throughput_write": disk["write"], **usage}
                           if disk else usage)
            net = ps.net_io_counters()
            rates = self._net.rates({"sent": net.bytes_sent, "recv": net.bytes_recv}) \
                if net else None
            if rates:
                got["network"] = {"net_throughput_sent": rates["sent"],
                                  "net_throughput_recv": rates["recv"]}
            if self._nvml is not None and self._nvml.handles:
                got["gpu"] = self._nvml.sample()
            for group, metrics in got.items():
                self._samples.setdefault(group, []).append(metrics)

    def flush(self) -> None:
        """Report each group's mean over the samples since the last flush (and the
        timer's timings), one record per group."""
        with self._lock:
            samples, self._samples = self._samples, {}
        now = time.time()
        records = [{"group": g, "time": now, "metrics": {self.host: average(s)}}
                   for g, s in samples.items() if s]
        if self.timer is not None:
            timings = self.timer.take()
            if timings is not None:
                records.append({"group": "timings", "time": now,
                                "metrics": {self.host: timings}})
        if self.timer is not None and self.timer.batch:
            for r in records:
                r["steps_completed"] = self.timer.batch
        if records:
            self.report(records)


def _visible_devices(environ: Mapping[str, str] | None = None) -> list[str] | None:
    """``CUDA_VISIBLE_DEVICES`` as a list of indices or UUID prefixes; None: not set
    (every GPU).

    >>> _visible_devices({"CUDA_VISIBLE_DEVICES": "1, GPU-ab"})
    ['1', 'GPU-ab']
    >>> _visible_devices({}) is None
    True
    """
    value = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    return [v.strip() for v in value.split(",") if v.strip()]


def _nvml_wanted() -> bool:
    """Whether to try NVML: not when ``CUDA_VISIBLE_DEVICES`` hides every GPU."""
    return os.environ.get("CUDA_VISIBLE_DEVICES", "x").strip() not in ("", "-1")


def start_profiler(session: Any, profiling: Mapping[str, Any] | None,
                   host: str | None = None, rate: Rate | None = None) -> SystemSampler | None:
    """Start the profiler of a writing ``session`` as the config's ``profiling`` says
    (None or ``{}``: det_sdk's default low rate; ``enabled: false``: none); it is kept as
    ``session.profiler``, stopped by the session's close. Returns it (None: off).
    ``rate``: this rate instead of the config's (``core_context.profiler.on``).

    >>> class Sink:
    ...     profiler = None
    ...     def report_system_metrics(self, records): self.records = records
    >>> start_profiler(Sink(), {"enabled": False}) is None
    True
    >>> s = Sink(); p = start_profiler(s, {"enabled": True, "begin_on_batch": 3})
    >>> p.rate == ENABLED_RATE and p.timer.begin == 3 and s.profiler is p
    True
    >>> p.stop()
    """
    profiling = dict(profiling or {})
    if profiling.get("enabled") is False:
        return None
    rate = rate or (ENABLED_RATE if profiling.get("enabled") else DEFAULT_RATE)
    # a sync per batch costs a GPU's overlap: only when the profiler is asked for
    timer = BatchTimer(int(profiling.get("begin_on_batch") or 0),
                       profiling.get("end_after_batch"),
                       bool(profiling.get("enabled")) and bool(profiling.get("sync_timings", True)))
    try:
        sampler = SystemSampler(session.report_system_metrics, rate, host=host, timer=timer)
        sampler.start()
    except Exception as err:  # psutil missing or refused here: train without the profiler
        log.warning("det_sdk: the profiler could not start (%s); no system metrics", err)
        return None
    session.profiler = sampler
    return sampler
