"""Why a task failed: the failing process's own exception, found in its output.

A trial or job that exits non-zero should say what went wrong in the user's words:
``ValueError: bad lr 7 at train.py:12``, not Horovod's "one or more processes exited
with non-zero status". Two sources, best first:

- **A failure record per rank.** The master launches each rank of a task under
  :mod:`det_sdk.launch.catch`, which passes the rank's standard error through, keeps
  its tail, and when the rank exits non-zero writes a small JSON record
  (:class:`Failure`: exception type, message, the innermost frame of the user's own
  code, the rank, when the traceback started, the exit status) into the task's
  record directory. The master picks the record whose failure came first, a failure
  that only reports another rank's end (:func:`is_consequence`) after every other.
- **The task's log**, when no record exists (the whole process group was killed): its
  bounded tail, Horovod's ``[1]<stderr>:`` and srun's ``1:`` rank prefixes stripped
  and the ranks' lines de-interleaved (:func:`split_ranks`), and the last traceback
  of the rank that printed one first (:func:`failure_from_log`).

A rank killed by a signal (a segfault) prints no traceback: its record says
"killed by signal SIGSEGV". Only the standard library is imported here (this module
runs in the wrapper of every rank, before the training script).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import sysconfig
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from det_sdk.atomic import write_atomic

__all__ = ["Failure", "describe_exit", "earliest", "exit_signal", "failure_from_log",
           "is_consequence", "parse_traceback", "read_records", "split_ranks", "stop_signal",
           "write_record"]

# bounds: a record and a last_error stay a few KB whatever the script printed
MAX_MESSAGE = 1000
MAX_TRACEBACK = 3000
MAX_LINE = 500

_HEADER = "Traceback (most recent call last):"
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>.+))?$')
_EXC_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<message>.*))?$")
# Horovod's (gloo: "[1]<stderr>:", mpirun's --tag-output: "[1,0]<stderr>:", optionally
# after a timestamp) and srun --label's ("1: ") rank prefixes
_HOROVOD_PREFIX = re.compile(r"^(?:[^\[]*?)\[(?:\d+,)?(?P<rank>\d+)\]<(?:stdout|stderr)>:")
_SRUN_PREFIX = re.compile(r"^\s*(?P<rank>\d+): ")

_DET_SDK_DIR = str(Path(__file__).resolve().parent) + os.sep
_LIBRARY_DIRS = tuple(
    {str(Path(p).resolve()) + os.sep for p in (sysconfig.get_paths().get("stdlib"),
                                               sysconfig.get_paths().get("platstdlib"))
     if p})


@dataclass
class Failure:
    """How one process failed (a rank of a task, or the task as its log shows it)."""

    type: str = ""  # the exception's type as printed ("ValueError", "det_sdk.errors.X")
    message: str = ""
    file: str | None = None  # the innermost frame of the user's own code
    line: int | None = None
    function: str | None = None
    source: str | None = None  # that frame's source line, as the traceback printed it
    traceback: str = ""  # the traceback's last MAX_TRACEBACK characters
    rank: int | None = None
    time: float | None = None  # when the traceback was printed (or the process ended)
    exit_code: int | None = None  # negative: killed by that signal

    def headline(self) -> str:
        """``ValueError: bad lr 7``, or how the process ended when it printed no exception.

        >>> Failure(type="ValueError", message="bad lr 7").headline()
        'ValueError: bad lr 7'
        >>> Failure(exit_code=-11).headline()
        'killed by signal SIGSEGV'
        >>> Failure(exit_code=2, message="error: no such file: data.csv").headline()
        'exited with code 2: error: no such file: data.csv'
        """
        if self.type:
            return f"{self.type}: {self.message}" if self.message else self.type
        if self.exit_code is not None:
            said = f": {self.message}" if self.message else ""
            return describe_exit(self.exit_code) + said
        return self.message or "failed"

    def where(self) -> str:
        """``at train.py:12, in <module> (rank 1)``: the user's frame and the rank."""
        parts = []
        if self.file:
            parts.append(f"at {self.file}:{self.line}"
                         + (f", in {self.function}" if self.function else ""))
        if self.rank is not None:
            parts.append(f"(rank {self.rank})")
        return " ".join(parts)

    def summary(self) -> str:
        """Headline, the user's frame with its source line, then the traceback."""
        out = [_clip(self.headline(), MAX_MESSAGE)]
        where = self.where()
        if where:
            out.append(f"  {where}")
        if self.source:
            out.append(f"    {_clip(self.source, MAX_LINE)}")
        if self.traceback:
            out.append("")
            out.append(self.traceback)
        return "\n".join(out)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_exit(code: int) -> str:
    """An exit status in words: a negative status (or a shell's 128+N) is a signal.

    >>> describe_exit(1), describe_exit(-9), describe_exit(139)
    ('exited with code 1', 'killed by signal SIGKILL', 'exited with code 139 (signal SIGSEGV?)')
    """
    signum = exit_signal(code)
    if code < 0:
        return f"killed by signal {_signal_name(signum)}"
    if signum:
        return f"exited with code {code} (signal {_signal_name(signum)}?)"
    return f"exited with code {code}"


def exit_signal(code: int) -> int:
    """The signal an exit status says ended the process (negative: killed by it; a
    shell reports 128+N), else 0.

    >>> exit_signal(-11), exit_signal(139), exit_signal(1), exit_signal(200)
    (11, 11, 0, 0)
    """
    return -code if code < 0 else code - 128 if 128 < code <= 128 + 64 else 0


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def is_library_file(path: str) -> bool:
    """Whether ``path`` is det_sdk's, an installed package's or the standard library's
    (frames there are not "the user's").

    >>> is_library_file("/venv/lib/python3.11/site-packages/keras/fit.py")
    True
    >>> is_library_file("train.py")
    False
    """
    if path.startswith("<"):  # <frozen runpy>, <string>
        return path != "<string>" and path != "<stdin>"
    if "/site-packages/" in path or "/dist-packages/" in path:
        return True
    try:
        full = str(Path(path).resolve())
    except (OSError, RuntimeError):
        full = path
    return full.startswith(_DET_SDK_DIR) or full.startswith(_LIBRARY_DIRS)


def parse_traceback(text: str | Iterable[str], cwd: str | None = None) -> Failure | None:
    """The last Python exception printed in ``text`` (one process's output), or None.

    Reads the last ``Traceback (most recent call last):`` block, or a ``SyntaxError``'s
    (which has no header): the exception line, and the innermost frame outside det_sdk,
    installed packages and the standard library (the innermost frame if all are).
    Paths under ``cwd`` are shown relative to it.

    >>> f = parse_traceback('''noise
    ... Traceback (most recent call last):
    ...   File "/w/train.py", line 12, in <module>
    ...     fit(lr=7)
    ...   File "/venv/lib/python3.11/site-packages/keras/fit.py", line 3, in fit
    ...     raise UsageError(f"bad lr {lr}")
    ... ValueError: bad lr 7
    ... more noise''', cwd="/w")
    >>> f.headline(), f.where(), f.source
    ('ValueError: bad lr 7', 'at train.py:12, in <module>', 'fit(lr=7)')
    """
    lines = text.splitlines() if isinstance(text, str) else list(text)
    start = None
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].strip() == _HEADER:
            start = i + 1
            break
    if start is None:  # a SyntaxError: File "...", line N / source / carets / the error
        for i in range(len(lines) - 1, -1, -1):
            m = _FRAME.match(lines[i])
            if m and not m.group("func") and lines[i].startswith("  "):
                start = i
                break
    if start is None:
        return None
    frames: list[tuple[str, int, str | None, str | None]] = []
    i = start
    while i < len(lines) and lines[i].startswith(" "):
        m = _FRAME.match(lines[i])
        if m:
            source = None
            if (i + 1 < len(lines) and lines[i + 1].startswith("    ")
                    and not _FRAME.match(lines[i + 1])):
                source = lines[i + 1].strip()
            frames.append((m.group("file"), int(m.group("line")), m.group("func"), source))
        i += 1
    if i >= len(lines) or not frames:
        return None
    exc = _EXC_LINE.match(lines[i].rstrip())
    if not exc:
        return None
    user = [f for f in frames if not is_library_file(f[0])]
    file, line, func, source = (user or frames)[-1]
    if cwd and file.startswith(cwd.rstrip(os.sep) + os.sep):
        file = file[len(cwd.rstrip(os.sep)) + 1:]
    block = "\n".join(_clip(x, MAX_LINE) for x in lines[max(start - 1, 0): i + 1])
    if len(block) > MAX_TRACEBACK:
        block = "...\n" + block[-MAX_TRACEBACK:].split("\n", 1)[-1]
    return Failure(type=exc.group("type"), message=_clip(exc.group("message") or "", MAX_MESSAGE),
                   file=file, line=line, function=func, source=source, traceback=block)


def split_ranks(text: str) -> tuple[dict[int, list[str]], list[str]]:
    """De-interleave a multi-rank log: each rank's lines without their prefix, and the
    unprefixed lines (the launcher's own).

    Horovod prefixes each line of rank 1 with ``[1]<stderr>:`` (``[1,0]<stderr>:`` under
    mpirun's ``--tag-output``); ``srun --label`` with ``1: ``.

    >>> split_ranks("[1]<stderr>:boom\\n[0]<stdout>:ok\\n[1,1]<stderr>:  again\\nhorovodrun")
    ({1: ['boom', '  again'], 0: ['ok']}, ['horovodrun'])
    """
    ranks, rest, _ = _split(text)
    return ranks, rest


def _split(text: str) -> tuple[dict[int, list[str]], list[str], dict[int, list[int]]]:
    """:func:`split_ranks`, with the log line number of each rank's lines."""
    ranks: dict[int, list[str]] = {}
    at: dict[int, list[int]] = {}
    rest: list[str] = []
    prefix = _HOROVOD_PREFIX if "]<std" in text else _SRUN_PREFIX
    for n, line in enumerate(text.splitlines()):
        m = prefix.match(line)
        if m:
            rank = int(m.group("rank"))
            ranks.setdefault(rank, []).append(line[m.end():])
            at.setdefault(rank, []).append(n)
        else:
            rest.append(line)
    return ranks, rest, at


def failure_from_log(text: str, cwd: str | None = None) -> Failure | None:
    """The root cause as a task's log shows it: of the ranks that printed a traceback,
    the one whose traceback starts first in the log (a traceback that only reports a
    peer's end, :func:`is_consequence`, after every other); without rank prefixes (one
    process), the log's last traceback.

    >>> log = ("[0]<stderr>:Traceback (most recent call last):\\n"
    ...        "[1]<stderr>:Traceback (most recent call last):\\n"
    ...        "[1]<stderr>:  File \\"t.py\\", line 3, in <module>\\n"
    ...        "[0]<stderr>:  File \\"t.py\\", line 9, in <module>\\n"
    ...        "[1]<stderr>:ValueError: bad lr 7\\n"
    ...        "[0]<stderr>:RuntimeError: peer gone\\n"
    ...        "RuntimeError: Horovod detected that one or more processes exited")
    >>> f = failure_from_log(log); f.headline(), f.rank
    ('RuntimeError: peer gone', 0)
    """
    ranks, rest, at = _split(text)
    found: list[tuple[int, Failure]] = []
    for rank, lines in ranks.items():
        f = parse_traceback(lines, cwd)
        if f is None:
            continue
        f.rank = rank
        # where this rank's last traceback starts, in the interleaved log
        header = len(lines) - 1 - lines[::-1].index(_HEADER) if _HEADER in lines else 0
        found.append((at[rank][header], f))
    if not found:
        return parse_traceback(rest, cwd)
    return min(found, key=lambda pf: (is_consequence(pf[1]), pf[0]))[1]


# --- records ------------------------------------------------------------------------------


def write_record(directory: str | Path, failure: Failure) -> Path:
    """Write ``failure`` as ``rank-<rank>-<pid>.json`` in ``directory`` (atomically)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    name = f"rank-{failure.rank if failure.rank is not None else 0}-{os.getpid()}.json"
    # written as the process dies: it has to outlive the process, not the machine
    return write_atomic(directory / name, json.dumps(asdict(failure)), durable=False)


def read_records(directory: str | Path, limit: int = 256) -> list[Failure]:
    """The failure records in ``directory`` (at most ``limit``, each at most 64 KiB; files
    that are not records are skipped)."""
    out: list[Failure] = []
    try:
        paths = sorted(Path(directory).glob("rank-*.json"))[:limit]
    except OSError:
        return out
    known = set(Failure.__dataclass_fields__)
    for path in paths:
        try:
            with open(path, "rb") as f:
                data = json.loads(f.read(65536))
            out.append(Failure(**{k: v for k, v in data.items() if k in known}))
        except (OSError, ValueError, TypeError):
            continue
    return out


# What a rank says when another rank ended first: a consequence, never the root cause,
# whatever its time (a busy machine can deliver the first rank's traceback late).
_PEER_ENDED = re.compile(
    r"Horovod has been shut down"  # a collective after a peer's exit shut Horovod down
    r"|HorovodInternalError"  # Horovod's collective failed: a peer is gone
    r"|one or more processes exited with non-zero"  # horovodrun's own summary
    r"|Connection (?:closed|reset) by peer"  # gloo's and torch.distributed's transports
    r"|NCCL communicator was aborted")


# signals by which a launcher stops the ranks left when one has ended (horovodrun, srun)
_STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})


def stop_signal(code: int) -> int:
    """The signal that stopped a process from outside (SIGTERM, SIGINT, SIGHUP) given its
    exit status (negative, or a shell's 128+N), else 0.

    >>> stop_signal(-15), stop_signal(143), stop_signal(-11), stop_signal(1)
    (15, 15, 0, 0)
    """
    signum = exit_signal(code)
    return signum if signum in _STOP_SIGNALS else 0


def is_consequence(failure: Failure) -> bool:
    """Whether ``failure`` only reports that another rank ended first: its error says so,
    or it was stopped from outside with nothing of its own to say.

    >>> is_consequence(Failure(type="UnknownError", message="... Horovod has been shut down."))
    True
    >>> is_consequence(Failure(exit_code=-15))
    True
    >>> is_consequence(Failure(type="ValueError", message="bad lr 7", exit_code=-15))
    False
    """
    if not failure.type and failure.exit_code is not None and stop_signal(failure.exit_code):
        return True
    return bool(_PEER_ENDED.search(f"{failure.type}: {failure.message}"))


def earliest(records: Iterable[Failure]) -> Failure | None:
    """The root cause among ranks' records: the first failure in time (a rank's
    traceback is timed when it starts printing, before its process ends and the others
    notice), then the lowest rank; a failure that only reports a peer's end
    (:func:`is_consequence`) comes after every other."""
    records = list(records)
    if not records:
        return None
    return min(records, key=lambda f: (is_consequence(f),
                                       f.time if f.time is not None else sys.maxsize,
                                       f.rank if f.rank is not None else 0))


def now() -> float:
    """The time a record carries (wall clock: ranks on several nodes are compared)."""
    return time.time()
