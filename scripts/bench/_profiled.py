"""Run a script under cProfile on every rank (scripts/bench/hvd_synthetic.py --profile).

``python _profiled.py PREFIX script.py args...`` runs ``script.py args...`` as
``__main__`` and writes its profile to ``PREFIX.rank<R>.prof``, ``R`` the rank Horovod's
launcher gives it (``HOROVOD_RANK``; 0 alone), so that the ranks of one ``horovodrun``
do not write one file.
"""

from __future__ import annotations

import cProfile
import os
import runpy
import sys


def main() -> None:
    prefix, script, *args = sys.argv[1:]
    sys.argv = [script, *args]
    rank = os.environ.get("HOROVOD_RANK", "0")
    profiler = cProfile.Profile()
    try:
        profiler.runcall(runpy.run_path, script, run_name="__main__")
    finally:
        profiler.dump_stats(f"{prefix}.rank{rank}.prof")


if __name__ == "__main__":
    main()
