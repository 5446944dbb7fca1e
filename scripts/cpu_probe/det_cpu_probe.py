"""Each Python process reports its own CPU when it exits, while DET_TEST_CPU_DIR is set.

The tests' CPU record (DET_TEST_CPU, tests/conftest.py) counts a child's CPU only once
the test's process reaps it; a master started with ``det master up`` is a daemon that
nobody reaps, so its trials, commands and launchers were not counted at all (a whole
file of cluster tests recorded 38 CPU s where the machine spent about 130). setup.sh
installs this module with a ``.pth`` line into each venv: every Python process imports
it at start-up, and it does nothing unless DET_TEST_CPU_DIR is set, in which case it
writes ``<user> <sys> <frameworks>`` (its own CPU seconds, not its children's: each
child writes its own; then which of TensorFlow, JAX and PyTorch it had imported, comma
separated, or ``-``) to ``$DET_TEST_CPU_DIR/<pid>-<ns>.cpu`` at exit: a framework's
import is most of a short process's CPU, so the report counts them. A process killed by a signal
that Python does not handle writes nothing (an undercount, never a double count).
Processes that are not Python (Chromium, sshd, Slurm's daemons) are not counted.

>>> import os
>>> "DET_TEST_CPU_DIR" in os.environ or _install(None) is None
True
"""

from __future__ import annotations

import atexit
import os
import sys
import time

#: the frameworks whose import the report counts (the module names)
FRAMEWORKS = ("tensorflow", "jax", "torch")


def loaded() -> str:
    """The frameworks this process imported, comma separated, or ``-``.

    >>> loaded() in ("-",) or all(f in FRAMEWORKS for f in loaded().split(","))
    True
    """
    return ",".join(f for f in FRAMEWORKS if f in sys.modules) or "-"


def _write(directory: str) -> None:
    user, system = os.times()[:2]
    try:
        with open(os.path.join(directory, f"{os.getpid()}-{time.monotonic_ns()}.cpu"),
                  "w") as out:
            out.write(f"{user:.3f} {system:.3f} {loaded()}\n")
    except OSError:  # the test's directory is gone: nothing to report to
        pass


def _install(directory: str | None) -> None:
    if directory:
        atexit.register(_write, directory)


_install(os.environ.get("DET_TEST_CPU_DIR"))
