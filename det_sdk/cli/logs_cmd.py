"""Logs as Determined's ``det trial logs`` / ``det experiment logs`` print them:
``--head N``, ``--tail N``, ``-f`` (follow until the task ends), plain text.

>>> first_lines("a\\nb\\nc\\n", 2), last_lines("a\\nb\\nc\\n", 1)
('a\\nb\\n', 'c\\n')
"""

from __future__ import annotations

import sys
import time
from argparse import Namespace

from det_sdk.cli.argtypes import whole_number
from det_sdk.cli.common import refused
from det_sdk.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["LOG_OPTIONS", "first_lines", "last_lines", "print_log"]

ENDED = ("COMPLETED", "CANCELED", "ERROR")


def first_lines(text: str, n: int) -> str:
    return "".join(text.splitlines(keepends=True)[:n])


def last_lines(text: str, n: int) -> str:
    return "".join(text.splitlines(keepends=True)[-n:]) if n > 0 else ""


def _read_all(client: Any, kind: str, task_id: int, offset: int = 0) -> tuple[str, int]:
    """The log from ``offset`` to its current end (the master answers 1 MiB a call)."""
    parts: list[str] = []
    while True:
        chunk = client.logs(kind, task_id, offset)
        if not chunk["text"]:
            return "".join(parts), offset
        parts.append(chunk["text"])
        offset = chunk["offset"]


def _write(text: str) -> None:
    if text:
        sys.stdout.write(text)
        sys.stdout.flush()


def print_log(client: Any, kind: str, task_id: int, state: Callable[[], str],
              args: Namespace) -> str | None:
    """Print a trial's (or job's) log as Determined does: everything, the first
    ``args.head`` or the last ``args.tail`` lines; with ``args.follow`` what it writes
    until it ends. Returns its final state when followed."""
    if getattr(args, "json", False):
        raise UsageError("--json: Determined prints its log records (timestamp, rank, level, "
                         "source) as JSON; det_sdk keeps logs as plain text, without such "
                         "records: drop --json (the text is what the task wrote)")
    head, tail = getattr(args, "head", None), getattr(args, "tail", None)
    if head is not None and tail is not None:
        raise UsageError("--head and --tail: give one of them (as in Determined)")
    if head is not None:
        shown, offset = "", 0
        while True:  # with -f: until N lines exist or the task ended
            final = state() if args.follow else None
            text, offset = _read_all(client, kind, task_id, offset)
            shown += text
            if not args.follow or len(shown.splitlines()) >= head or final in ENDED:
                _write(first_lines(shown, head))
                return final
            time.sleep(0.5)
    text, offset = _read_all(client, kind, task_id)
    _write(text if tail is None else last_lines(text, tail))
    if not args.follow:
        return None
    while True:
        final = state()
        text, offset = _read_all(client, kind, task_id, offset)
        _write(text)
        if final in ENDED and not text:
            return final
        time.sleep(0.5)


_non_negative = whole_number(0)  # an argparse type=


_NO_RECORDS = ("this log is served as the plain text the task wrote, without Determined's "
               "per-line records: filter the text instead (e.g. | grep); a trial's log has "
               "them: det trial logs ID --rank-id/--level/--json")

#: Determined's log options (harness/determined/cli/trial.py's logs_args_description)
LOG_OPTIONS: list[tuple[Any, ...]] = [
    (("-f", "--follow"), {"action": "store_true",
                          "help": "print the log as it grows, until the task ends"}),
    ("--head", {"type": _non_negative, "metavar": "N", "help": "the first N lines"}),
    ("--tail", {"type": _non_negative, "metavar": "N", "help": "the last N lines"}),
    ("--json", refused("Determined prints its log records (timestamp, rank, level, "
                        "source) as JSON; this log is served as the plain text the task "
                        "wrote: drop --json (det trial logs ID --json has the records)",
                        takes_value=False)),
    *((flag, refused(f"{_NO_RECORDS}", takes_value=True))
      for flag in ("--agent-id", "--container-id", "--rank-id", "--timestamp-before",
                   "--timestamp-after", "--level", "--source", "--stdtype")),
]
