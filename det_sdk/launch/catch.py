"""Run one rank's command and record why it failed: ``python -m det_sdk.launch.catch
--record-dir DIR -- COMMAND...``.

The master starts every rank of a trial or job under this wrapper (the local resource
manager inside ``horovodrun``, the Slurm one inside ``srun``). It runs COMMAND as its
child with standard output and standard error through pipes: each chunk is written
on to the wrapper's own stream of the same name at once (the task's log sees the same
bytes) and standard error's last lines are kept. With ``--stream-index PATH`` (a task of
one process, whose two streams are one log file) it notes where each stream's bytes
landed in that file (:mod:`det_sdk.log_streams`), so that the log's lines keep their
stream. When COMMAND exits non-zero the wrapper parses the last
Python traceback of this rank's standard error alone (no other rank's lines in
between, no prefixes) and writes a :class:`det_sdk.failure.Failure` record to DIR:
the exception's type and message, the innermost frame of the user's code, this rank
(``HOROVOD_RANK``, else ``SLURM_PROCID``, else 0), when the traceback started, and
the exit status. A rank killed by a signal gets a record saying which; one stopped
from outside (SIGTERM) while it was ending of its own uncaught exception, that
exception.

Why a wrapper around the process, not a ``sys.excepthook`` that det_sdk installs:
it sees what happens before det_sdk is imported (an ImportError, a SyntaxError in
``train.py``), scripts that never call ``det.keras.init()``, entrypoints that are not
Python, exits by ``sys.exit("message")`` and deaths by signal, and it needs nothing
from the user's interpreter.

Signals: the local manager (``killpg``) and Slurm (every process of the step) signal
the wrapper and COMMAND alike: by default the wrapper lets SIGTERM and SIGINT go to
COMMAND on their own and waits for its end, as the local manager's shell does (passing
them on would deliver each twice: a second Ctrl-C interrupts det_sdk at once).
``horovodrun`` signals only the process it started (the wrapper): under it the master
adds ``--forward-signals``, and the wrapper passes SIGTERM and SIGINT on to COMMAND's
process group (COMMAND is ``sh -c ENTRYPOINT``: the shell dies of SIGTERM, the worker
it started stops gracefully), adopts COMMAND's orphans (a child subreaper, so that
horovodrun's end of the rank's tree still reaches them) and exits only once the group
is gone: a worker never outlives its task, and the master never relaunches a trial
beside its earlier worker.
Its own exit status is COMMAND's (128+N when COMMAND was killed by signal N, as a
shell reports it).
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import select
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from det_sdk.failure import (
    Failure,
    exit_signal,
    now,
    parse_traceback,
    stop_signal,
    write_record,
)
from det_sdk.log_streams import STDERR, STDOUT, StreamIndexWriter
from det_sdk.ranks import rank_hint

__all__ = ["main"]

_KEEP_LINES = 400  # the last lines of standard error kept for parsing
_PARTIAL_SECONDS = 0.25  # an unfinished line is held back this long, then passed on
_PARTIAL_BYTES = 65536  # ... or once it is this long
_GROUP_SECONDS = 60.0  # after COMMAND exits, how long the rest of its group may stop
_PR_SET_CHILD_SUBREAPER = 36  # prctl(2)
_DRAIN_SECONDS = 2.0  # after COMMAND exits, how long its children may hold the pipe
# a traceback followed by more than this many lines was handled: not the cause of the exit
_STALE_AFTER = 50
# ... and for a process stopped by a signal from outside (SIGTERM, SIGINT, SIGHUP; not
# SIGKILL, the OOM killer's, which is the news whatever was printed before)
_ENDING_AFTER = 20  # (teardown warnings: a few lines)


class _Tail:
    """The last lines of a stream with the time each arrived (bounded)."""

    def __init__(self) -> None:
        self.lines: collections.deque[tuple[float, str]] = collections.deque(maxlen=_KEEP_LINES)
        self._partial = b""

    def feed(self, chunk: bytes, t: float | None = None) -> None:
        """Keep ``chunk``'s complete lines, each timed ``t`` (when it was read)."""
        data = self._partial + chunk
        *complete, self._partial = data.split(b"\n")
        self._partial = self._partial[-4096:]
        t = now() if t is None else t
        for raw in complete[-_KEEP_LINES:]:
            self.lines.append((t, raw[:4096].decode(errors="replace").rstrip("\r")))

    def close(self) -> None:
        if self._partial:
            self.feed(b"\n")


class _Stream:
    """One of COMMAND's streams, passed on to ``out`` in whole lines."""

    def __init__(self, out: BinaryIO, tail: _Tail | None = None,
                 index: StreamIndexWriter | None = None, code: int = STDOUT) -> None:
        self.out = out
        self.tail = tail  # standard error's lines, kept for the failure record
        self.index = index  # where each run of this stream lands in the shared log
        self.code = code
        self.partial = b""  # the unfinished line, held back
        self.since = 0.0  # when the held-back line started

    def feed(self, chunk: bytes, read_at: float) -> None:
        # timed as read, before it is passed on: writing to the log can block (horovodrun
        # reads every rank's pipe on a busy machine), and a late time for this rank's
        # traceback would make another rank's later failure look like the first
        if self.tail is not None:
            self.tail.feed(chunk, read_at)
        if not self.partial:
            self.since = time.monotonic()
        data = self.partial + chunk
        end = data.rfind(b"\n") + 1
        self.partial = data[end:]
        if len(self.partial) > _PARTIAL_BYTES:  # one endless line: pass it on as it comes
            end, self.partial = len(data), b""
        self._write(data[:end])
        if self.partial and end:
            self.since = time.monotonic()

    def flush_stale(self, moment: float) -> None:
        """Pass on a line left unfinished since ``_PARTIAL_SECONDS`` before ``moment``."""
        if self.partial and moment - self.since >= _PARTIAL_SECONDS:
            self._write(self.partial)
            self.partial = b""

    def finish(self) -> None:
        """The stream is closed: pass on what is left."""
        self._write(self.partial)
        self.partial = b""
        if self.tail is not None:
            self.tail.close()

    def _write(self, data: bytes) -> None:
        if not data:
            return
        if self.index is not None:
            self.index.before_write(self.code)
        try:
            self.out.write(data)
            self.out.flush()
        except (OSError, ValueError):
            return  # the log is gone: keep reading, so COMMAND never blocks on a full pipe
        if self.index is not None:
            self.index.after_write(len(data))


def _pump(streams: dict[int, _Stream]) -> None:
    """Pass COMMAND's streams on until both are closed; one thread writes them all, so
    one stream's line never lands inside another's."""
    poller = select.poll()
    for fd in streams:
        poller.register(fd, select.POLLIN)
    open_fds = set(streams)
    while open_fds:
        waiting = [s.since for s in streams.values() if s.partial]
        timeout = None if not waiting else max(
            0, int((min(waiting) + _PARTIAL_SECONDS - time.monotonic()) * 1000) + 1)
        for fd, _ in poller.poll(timeout):
            read_at = now()
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:  # closed (POLLHUP or POLLERR read as end of stream)
                poller.unregister(fd)
                open_fds.discard(fd)
                streams[fd].finish()
            else:
                streams[fd].feed(chunk, read_at)
        moment = time.monotonic()
        for stream in streams.values():
            stream.flush_stale(moment)


def _rank() -> int:
    return rank_hint()  # horovodrun's, else Slurm's, Open MPI's, torchrun's, else 0


# What libraries log as they start, not a program's last word: absl/glog info and warning
# lines (TensorFlow 2.21 prints "I0000 ... oneDNN custom operations are on" to stderr
# whatever TF_CPP_MIN_LOG_LEVEL says) and absl's notice before its log is set up. A
# process that ends with os._exit(3) after them said nothing of why.
_LOG_NOISE = re.compile(r"[IW]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ \S+:\d+\] "
                        r"|WARNING: All log messages before absl::InitializeLog\(\)")


def failure_of(tail: _Tail, code: int, cwd: str, rank: int) -> Failure:
    """This rank's failure from its standard error's tail and its exit status."""
    lines = [line for _, line in tail.lines]
    ended = now()
    header = max((i for i, line in enumerate(lines)
                  if line.strip() == "Traceback (most recent call last):"), default=None)
    signalled = bool(exit_signal(code))
    # a crash (SIGSEGV, SIGABRT): an earlier traceback is not why it ended; stopped from
    # outside (horovodrun stops the other ranks when one exits) while it was already
    # ending of an uncaught exception (tearing TensorFlow and Horovod down takes
    # seconds): that exception is why, if nothing much was printed after it
    stopped = bool(stop_signal(code))
    failure = None if signalled and not stopped else parse_traceback(lines, cwd)
    if failure is not None and header is not None:
        printed = failure.traceback.count("\n") + 1
        if len(lines) - header > printed + (_ENDING_AFTER if stopped else _STALE_AFTER):
            failure = None  # the process went on long after that traceback: handled
        else:
            failure.time = tail.lines[header][0]  # when it started printing
    if failure is None:
        failure = Failure(time=ended)
        last = [line for line in lines if line.strip() and not _LOG_NOISE.match(line)][-1:]
        if last and not signalled:  # sys.exit("message"), a non-Python program's last word
            failure.message = last[0].strip()[:1000]
    elif failure.time is None:
        failure.time = ended  # a SyntaxError's, without a header
    failure.rank = rank
    failure.exit_code = code
    return failure


#: where the failure records go, for launchers that start workers under COMMAND
RECORD_DIR_VAR = "DET_FAILURE_RECORD_DIR"


def run(record_dir: str, command: Sequence[str], forward_signals: bool = False,
        stream_index: str | None = None) -> int:
    """Run ``command``; on a non-zero exit write its failure record to ``record_dir``.

    ``forward_signals``: pass SIGTERM and SIGINT on to ``command`` (when whoever signals
    this process does not signal ``command`` too). ``stream_index``: where to note which
    of ``command``'s streams each run of bytes came from, when this process's standard
    output and error are one log file (:mod:`det_sdk.log_streams`).
    """
    child: list[subprocess.Popen[bytes]] = []

    def on_signal(signum: int, frame: object) -> None:
        if forward_signals and child:
            # to COMMAND's whole group: COMMAND is ``sh -c ENTRYPOINT``, and a shell
            # ended by SIGTERM would leave the worker it started running on, orphaned
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child[0].pid, signum)

    if forward_signals:
        _become_subreaper()  # COMMAND's orphans stay this process's: horovodrun ends them

    for signum in (signal.SIGTERM, signal.SIGINT):
        # a handler, not SIG_IGN: COMMAND gets the default disposition back at exec
        signal.signal(signum, on_signal)
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    try:
        # launchers inside COMMAND wrap their own workers with the same record dir
        env = {**os.environ, RECORD_DIR_VAR: str(record_dir)}
        # forwarding: COMMAND leads its own group, so that a signal reaches all of it
        proc = subprocess.Popen(list(command), stdout=out_write, stderr=err_write, env=env,
                                process_group=0 if forward_signals else None)
    except OSError as err:
        for fd in (out_read, out_write, err_read, err_write):
            os.close(fd)
        print(f"det_sdk.launch.catch: cannot run {command[0]!r}: {err}", file=sys.stderr)
        failure = Failure(type=type(err).__name__, message=f"cannot run {command[0]!r}: {err}",
                          rank=_rank(), time=now(), exit_code=127)
        _write(record_dir, failure)
        return 127
    child.append(proc)
    os.close(out_write)
    os.close(err_write)
    tail = _Tail()
    index = _index_writer(stream_index)
    streams = {out_read: _Stream(sys.stdout.buffer, index=index, code=STDOUT),
               err_read: _Stream(sys.stderr.buffer, tail, index=index, code=STDERR)}
    pump = threading.Thread(target=_pump, args=(streams,), daemon=True)
    pump.start()
    while True:
        try:
            code = proc.wait()
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for safety
            continue
    if forward_signals:
        _wait_group_gone(proc.pid)
    pump.join(_DRAIN_SECONDS)  # a background child may hold the pipe open
    if index is not None and not pump.is_alive():
        index.close()
    if code != 0:
        _write(record_dir, failure_of(tail, code, os.getcwd(), _rank()))
    return 128 - code if code < 0 else code


def _index_writer(path: str | None) -> StreamIndexWriter | None:
    """The stream index's writer, when asked for one and both streams are one file
    (a terminal or a pipe has no offsets to note)."""
    if path is None:
        return None
    try:
        out, err = os.fstat(sys.stdout.fileno()), os.fstat(sys.stderr.fileno())
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(out.st_mode) or (out.st_dev, out.st_ino) != (err.st_dev, err.st_ino):
        return None
    return StreamIndexWriter(Path(path), sys.stdout.fileno())


def _become_subreaper() -> None:
    """Orphans of COMMAND (a worker whose shell a signal ended) become this process's
    children, not init's: they stay in the tree that horovodrun ends and waits for."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the group wait below still holds
        pass


def _wait_group_gone(pgid: int) -> None:
    """Wait until no process of COMMAND's group is left, reaping the orphans adopted on
    the way; past :data:`_GROUP_SECONDS` what is left is killed. The task ends with its
    last worker: a master that relaunched it earlier would run two at once (a relaunch
    met its own earlier worker's lock on a streamed predict's output)."""
    deadline = time.monotonic() + _GROUP_SECONDS
    while True:
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
            deadline = time.monotonic() + _GROUP_SECONDS
        time.sleep(0.05)


def _write(record_dir: str, failure: Failure) -> None:
    try:
        write_record(record_dir, failure)
    except OSError as err:  # the task's status is what matters; say why there is no record
        print(f"det_sdk.launch.catch: cannot write the failure record to {record_dir}: {err}",
              file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """``[--forward-signals] [--stream-index PATH] --record-dir DIR -- COMMAND...``."""
    args = list(sys.argv[1:] if argv is None else argv)
    forward = args[:1] == ["--forward-signals"]
    if forward:
        args = args[1:]
    index = None
    if args[:1] == ["--stream-index"] and len(args) > 1:
        index, args = args[1], args[2:]
    if len(args) < 4 or args[0] != "--record-dir" or args[2] != "--":
        print("usage: python -m det_sdk.launch.catch [--forward-signals] [--stream-index PATH] "
              "--record-dir DIR -- COMMAND...", file=sys.stderr)
        return 2
    return run(args[1], args[3:], forward, index)


if __name__ == "__main__":
    sys.exit(main())
