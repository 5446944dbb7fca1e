"""Determined's ``TASK_LOG`` webhook trigger: a trial's log line that matches a regex.

Regexes are RE2's (``google-re2``), as Determined's are Go's, which is RE2: matching
takes time linear in the line, so a catastrophic pattern (``(a+)+$``) costs what any
other does, and what RE2 cannot promise (backreferences, lookaround) is refused at
creation (:func:`compile_regex`), naming the field.

:class:`LogWatcher` is a thread that reads what trials append to their logs, every
:data:`POLL_S` seconds, only while some webhook has a TASK_LOG trigger. It reads the
log files the master already keeps (no change to how tasks log), at most
:data:`READ_BYTES` per trial per round: a trial that logs faster than that has the
excess skipped, and the master's log says how much. Each line is matched on its first
:data:`LINE_CHARS` characters. As in Determined, a trigger fires once per trial (the
first matching line); that memory is the master's process's, so a restarted master may
fire again for a trial it had already reported.

>>> compile_regex("loss is (NaN|inf)").search("step 40: loss is NaN") is not None
True
>>> compile_regex(r"(a)\\1")
Traceback (most recent call last):
...
det_sdk.master.errors.InvalidRequest: condition.regex: RE2 refuses it: invalid escape sequence: \\1
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from det_sdk.master.errors import InvalidRequest

__all__ = ["LINE_CHARS", "MAX_REGEX", "POLL_S", "READ_BYTES", "LogWatcher", "Running",
           "compile_regex"]

log = logging.getLogger("det_sdk.master.webhooks")

POLL_S = 0.5
READ_BYTES = 4 << 20
LINE_CHARS = 4096
MAX_REGEX = 1000

#: ``(trial_id, experiment_id, allocation_id, log_path)`` of each trial to read
Running = tuple[int, int, str, Path]


def compile_regex(pattern: Any, field: str = "condition.regex") -> Any:
    """``pattern`` compiled by RE2; :class:`InvalidRequest` naming ``field`` when it is
    not a string, too long, or not a regex RE2 accepts."""
    import re2  # google-re2: the master extra's (no type hints: pyproject's mypy overrides)

    if not isinstance(pattern, str) or not pattern:
        raise InvalidRequest(f"{field}: expected a non-empty regex (RE2 syntax)")
    if len(pattern) > MAX_REGEX:
        raise InvalidRequest(f"{field}: {len(pattern)} characters, at most {MAX_REGEX}")
    options = re2.Options()
    options.log_errors = False  # RE2 would print the error on the master's stderr
    options.never_capture = True
    try:
        return re2.compile(pattern, options)
    except re2.error as err:
        why = err.args[0].decode(errors="replace") if err.args and \
            isinstance(err.args[0], bytes) else str(err)
        raise InvalidRequest(f"{field}: RE2 refuses it: {why}") from None


class LogWatcher:
    """Reads running trials' logs and hands each line that matches a TASK_LOG trigger
    to ``fire(trial_id, experiment_id, allocation_id, line, trigger)``.

    ``triggers()`` gives the current ``[(trigger, compiled), ...]`` (``trigger``: a dict
    with ``id``); ``running()`` the trials to read (:data:`Running`).
    """

    def __init__(self, triggers: Callable[[], list[tuple[dict[str, Any], Any]]],
                 running: Callable[[], Iterable[Running]],
                 fire: Callable[[int, int, str, str, dict[str, Any]], None],
                 every: float = POLL_S) -> None:
        self.triggers, self.running, self.fire, self.every = triggers, running, fire, every
        self._offsets: dict[int, int] = {}  # trial id -> bytes of its log read so far
        self._fired: set[tuple[int, int]] = set()  # (trial id, trigger id)
        self._ended: dict[int, Running] = {}  # trials that ended since the last round
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True, name="det-log-hooks")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def trial_ended(self, trial: Running) -> None:
        """A trial ended: its log is read to its end at the next round (it may have
        started and ended between two rounds)."""
        with self._lock:
            self._ended[trial[0]] = trial

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.scan()
            except Exception:  # a bug here must not end the thread
                log.exception("webhooks: reading the trials' logs failed")

    def scan(self) -> None:
        """One round: read what each running (or just ended) trial logged since the last."""
        with self._lock:
            ended, self._ended = self._ended, {}
        triggers = self.triggers()
        if not triggers:
            return
        running = {t[0]: t for t in self.running()}
        for trial in running.values():
            self._read(trial, triggers, final=False)
        for trial_id, trial in ended.items():
            if trial_id not in running:  # read to its end (a last line without its newline)
                self._read(trial, triggers, final=True)
                self._offsets.pop(trial_id, None)

    def _read(self, trial: Running, triggers: list[tuple[dict[str, Any], Any]],
              final: bool) -> None:
        trial_id, exp_id, alloc_id, path = trial
        waiting = [(t, rx) for t, rx in triggers if (trial_id, t["id"]) not in self._fired]
        if not waiting:
            return
        offset = self._offsets.get(trial_id, 0)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size - offset > READ_BYTES:
                    log.warning("webhooks: trial %d logged %d bytes since the last look: the "
                                "oldest %d not matched", trial_id, size - offset,
                                size - offset - READ_BYTES)
                    offset = size - READ_BYTES
                f.seek(offset)
                data = f.read(min(READ_BYTES, max(0, size - offset)))
        except OSError:
            return  # no log yet
        # whole lines only (the rest is read next round), unless the trial has ended
        end = len(data) if final else data.rfind(b"\n") + 1
        self._offsets[trial_id] = offset + end
        for raw in data[:end].splitlines():
            line = raw[:LINE_CHARS * 4].decode("utf-8", errors="replace")[:LINE_CHARS]
            for t, rx in list(waiting):
                if rx.search(line):
                    self._fired.add((trial_id, t["id"]))
                    waiting.remove((t, rx))
                    self.fire(trial_id, exp_id, alloc_id, line, t)
            if not waiting:
                return
