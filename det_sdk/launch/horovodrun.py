"""``horovodrun`` without the start-up check that imports TensorFlow:
``python -m det_sdk.launch.horovodrun -np 2 --gloo python3 train.py``.

Every ``horovodrun --gloo`` first asks whether Horovod was built with Gloo by forking a
process that imports ``horovod.tensorflow`` (so TensorFlow) and calls its
``gloo_built()``, on each launch (``-np 2 --gloo python -c pass``: 4.0 s of CPU and
3.6 s of wall time for ``horovodrun``, 0.6 s and 0.5 s for this module;
scripts/bench/bench_launch.py). The master launches every multi-slot trial, and
every resume of one, through this module: it reads the answer from the framework
extensions' files instead (their code names Gloo's rendezvous when Gloo is compiled
in: 36 ms), and otherwise runs ``horovodrun``'s own code unchanged (its arguments, its
``[rank]<stdout>:`` prefixes, its end of every rank when one fails). Where no
extension file says so, Horovod's own check decides, as ``horovodrun``'s does.

>>> gloo_in_extensions(Path("/nonexistent")) is None
True
"""

from __future__ import annotations

import mmap
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["command", "gloo_in_extensions", "main"]

#: a name only an extension built with Gloo holds (its rendezvous with the launcher)
_GLOO_MARK = b"gloo::rendezvous"


def command() -> list[str]:
    """The command that starts this launcher with det_sdk's interpreter.

    >>> command()[1:]
    ['-m', 'det_sdk.launch.horovodrun']
    """
    return [sys.executable, "-m", "det_sdk.launch.horovodrun"]


def gloo_in_extensions(root: Path) -> bool | None:
    """True when one of Horovod's framework extensions under ``root`` (the ``horovod``
    package) was built with Gloo; None when none says so (Horovod's check decides)."""
    for lib in sorted(root.glob("*/mpi_lib*.so")):
        try:
            with open(lib, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                if m.find(_GLOO_MARK) >= 0:
                    return True
        except (OSError, ValueError):  # unreadable or empty: let Horovod's check say
            continue
    return None


def main(argv: Sequence[str] | None = None) -> object:
    """Run ``horovodrun`` with ``argv`` (default: this process's arguments); returns
    what ``horovodrun``'s own entry point returns (its script exits with it)."""
    import horovod
    import horovod.runner.launch as launch

    found = gloo_in_extensions(Path(horovod.__file__).parent)
    if found:
        # run_controller reads this module-level name; horovodrun's other checks stay
        launch.gloo_built = lambda verbose=False: True
    sys.argv = ["horovodrun", *(sys.argv[1:] if argv is None else argv)]
    return launch.run_commandline()


if __name__ == "__main__":
    raise SystemExit(main())
