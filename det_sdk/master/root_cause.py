"""A failed task's ``last_error``: the first failing rank's own exception, then the tail.

On a non-zero exit the scheduler asks :func:`last_error` for the text to record. It
leads with the root cause (:mod:`det_sdk.failure`): the earliest failure record the
task's ranks wrote under :func:`record_dir` (each rank runs under
:mod:`det_sdk.launch.catch`), else the first traceback in the log's tail with the
ranks de-interleaved, else how the process ended ("killed by signal SIGSEGV"). Then
the exit status, the restarts, and the log's last lines.

Bounded: the log is read from its last :data:`TAIL_BYTES` only (a huge or hostile log
costs the master one seek and one small read), records are read at most 64 KiB each,
and the text is at most :data:`MAX_CHARS`.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from det_sdk.failure import Failure, describe_exit, earliest, failure_from_log, read_records

__all__ = ["MAX_CHARS", "TAIL_BYTES", "catch_command", "failure_note", "last_error",
           "read_tail", "record_dir", "root_cause"]

TAIL_BYTES = 64 * 1024
MAX_CHARS = 8000
TAIL_LINES = 20
_TAIL_CHARS = 3000


def record_dir(workdir: str | Path, alloc_id: str) -> Path:
    """Where an allocation's ranks write their failure records (beside its working
    directory, as its exit status is)."""
    return Path(workdir).parent / f"{alloc_id}.failures"


def catch_command(entrypoint: str, records: str | Path, forward_signals: bool = False,
                  stream_index: str | Path | None = None) -> str:
    """The shell command that runs one rank of ``entrypoint`` under
    :mod:`det_sdk.launch.catch`, its failure record going to ``records``
    (``forward_signals``: under horovodrun, which signals the wrapper alone;
    ``stream_index``: where it notes which stream each part of the log came from)."""
    return shlex.join([sys.executable, "-m", "det_sdk.launch.catch",
                       *(["--forward-signals"] if forward_signals else []),
                       *(["--stream-index", str(stream_index)] if stream_index else []),
                       "--record-dir", str(records), "--", "sh", "-c", entrypoint])


def read_tail(path: str | Path, max_bytes: int = TAIL_BYTES) -> str:
    """The last ``max_bytes`` of a file as text, from its first whole line ("" if none)."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(size - max_bytes, 0))
            data = f.read(max_bytes)
    except OSError:
        return ""
    if size > max_bytes:
        data = data.split(b"\n", 1)[-1]
    return data.decode(errors="replace")


def root_cause(alloc: Mapping[str, Any] | None, log_text: str) -> Failure | None:
    """The failure that ended the task: its ranks' earliest record, else the log's."""
    if alloc and alloc.get("workdir"):
        found = earliest(read_records(record_dir(alloc["workdir"], alloc["id"])))
        if found is not None:
            return found
    cwd = str(alloc["workdir"]) if alloc and alloc.get("workdir") else None
    return failure_from_log(log_text, cwd)


def last_error(alloc: Mapping[str, Any] | None, log_path: str | Path, code: int,
               restarts: int | None = None) -> str:
    """The text a failed task records: root cause, exit status, the log's last lines."""
    text = read_tail(log_path)
    failure = root_cause(alloc, text)
    after = f" after {restarts} restarts" if restarts is not None else ""
    lines = [_clip_line(x) for x in text.splitlines()[-TAIL_LINES:]]
    tail = "\n".join(lines)
    if len(tail) > _TAIL_CHARS:
        tail = "...\n" + tail[-_TAIL_CHARS:].split("\n", 1)[-1]
    status = f"{describe_exit(code)}{after}"
    parts = [failure.summary(), ""] if failure is not None else []
    parts.append(f"{status}; the log's last lines:\n{tail}" if tail else status)
    out = "\n".join(parts)
    return out if len(out) <= MAX_CHARS else out[: MAX_CHARS - 4] + "\n..."


def _clip_line(line: str, limit: int = 500) -> str:
    return line if len(line) <= limit else line[: limit - 3] + "..."


def failure_note(alloc: Mapping[str, Any] | None, log_path: str | Path, code: int) -> str:
    """One short paragraph for the end of a failed job's log (jobs have no
    ``last_error``): how it ended, then the root cause with the user's frame."""
    failure = root_cause(alloc, read_tail(log_path))
    note = describe_exit(code)
    if failure is None or not (failure.type or failure.message):
        return note
    lines = [f"{note}: {_clip_line(failure.headline(), 1000)}"]
    if failure.where():
        lines.append(f"  {failure.where()}")
    if failure.source:
        lines.append(f"    {_clip_line(failure.source)}")
    return "\n".join(lines)
