"""Determined's ``startup-hook.sh``: a script in the model or context directory that runs
before the task (a trial, a batch job, a command), in the task's shell, as Determined's
entrypoints run it: ``set -e`` and ``set -x`` around ``source startup-hook.sh``, so that
what it exports reaches the task, every line of it is traced into the task's log, and its
first failing line ends the task with that status (the task's command never starts).

Determined sources it with bash; so does det_sdk when bash is there (else ``sh``).

>>> import tempfile
>>> d = Path(tempfile.mkdtemp())
>>> hook_prefix(d), task_shell(d)
('', 'sh')
>>> _ = (d / STARTUP_HOOK).write_text("export DATA=/d\\n")
>>> hook_prefix(d).startswith("trap ")
True
"""

from __future__ import annotations

import shutil
from pathlib import Path

__all__ = ["STARTUP_HOOK", "hook_prefix", "task_shell"]

STARTUP_HOOK = "startup-hook.sh"

# the failure is said in the log, after the trace of the line that failed; the trap is
# cleared once the hook has run, so the task's own exit is not reported as the hook's
_ON_FAILURE = ("trap 'c=$?; set +x; [ $c -eq 0 ] || echo \"det_sdk: " + STARTUP_HOOK +
               " failed (exit status $c): the task did not start\" >&2' EXIT; ")


def hook_prefix(workdir: Path) -> str:
    """The shell text that sources ``workdir``'s startup hook, to put before the task's
    command; "" when it has none."""
    if not (workdir / STARTUP_HOOK).is_file():
        return ""
    return f"{_ON_FAILURE}set -ex; . ./{STARTUP_HOOK}; set +ex; trap - EXIT; "


def task_shell(workdir: Path) -> str:
    """The shell that runs a task's command: bash where there is a hook to source (as
    Determined's), else ``sh``."""
    if (workdir / STARTUP_HOOK).is_file() and shutil.which("bash"):
        return "bash"
    return "sh"
