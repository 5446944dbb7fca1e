"""The Horovod launcher: start this node's workers under ``horovodrun``.

::

    entrypoint: python3 -m det_sdk.launch.horovod -- python3 train.py
    entrypoint: python3 -m determined.launch.horovod -- python3 train.py   # the same

Determined's launch model runs an ``entrypoint`` once per node; this launcher runs the
script ``len(ClusterInfo.slot_ids)`` times under ``horovodrun --gloo`` (one process
per slot, as ``det.keras.init()`` scripts expect). Where each process already is a
worker (under ``horovodrun``, or on Slurm, which starts every rank itself) or the node
has one slot, it runs the script unchanged. Determined's ``--autohorovod`` and
``--trial`` flags are accepted (det_sdk needs neither).

>>> parse_args(["--autohorovod", "--", "python3", "train.py"])
['python3', 'train.py']
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from det_sdk.errors import UsageError
from det_sdk.launch._node import node_slots, under_horovodrun
from det_sdk.ranks.horovodrun import launched as launched_by_horovod

__all__ = ["main", "parse_args"]


def parse_args(argv: Sequence[str]) -> list[str]:
    """The script's command from the launcher's arguments."""
    p = argparse.ArgumentParser(prog="python -m det_sdk.launch.horovod",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--autohorovod", action="store_true", help="accepted (Determined's)")
    p.add_argument("--trial", help="accepted (Determined's legacy trial entrypoint)")
    p.add_argument("script", nargs=argparse.REMAINDER)
    ns = p.parse_args(list(argv))
    script = list(ns.script)
    if script and script[0] == "--":
        script = script[1:]
    if not script:
        raise UsageError("det_sdk.launch.horovod: give the command to run, e.g. "
                         "`python3 -m det_sdk.launch.horovod -- python3 train.py`")
    return script


def main(argv: Sequence[str] | None = None) -> int:
    """Run the launcher; returns the exit status (or does not return: it execs)."""
    try:
        script = parse_args(sys.argv[1:] if argv is None else argv)
    except UsageError as err:
        print(err, file=sys.stderr)
        return 2
    n = 1 if launched_by_horovod() else node_slots()
    command = script if n == 1 else under_horovodrun(script, n)
    try:
        os.execvp(command[0], command)
    except OSError as err:
        print(f"det_sdk.launch.horovod: cannot run {command[0]!r}: {err}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
