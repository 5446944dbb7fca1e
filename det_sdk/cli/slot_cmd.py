"""``det slot list``: the master's slots, who holds each, and its GPUs' use now (the
holder trial's latest ``gpu`` record from its profiler, det_sdk.profiler)."""

from __future__ import annotations

from argparse import Namespace

from det_sdk.cli import common
from det_sdk.cli.common import CSV
from det_sdk.cli.render import print_json, print_rows

TYPE_CHECKING = False  # typing costs `det --help` 4 ms: for the type checker only
if TYPE_CHECKING:
    from typing import Any

__all__ = ["COMMANDS", "gpu_use"]


def gpu_use(gpus: dict[str, Any] | None) -> str:
    """A holder's GPUs as one cell: ``UUID util% used GiB`` each.

    >>> gpu_use({"time": 1.0, "metrics": {"h": {"GPU-1": {"gpu_util": 97.0,
    ...          "gpu_memory_used": 2 * 2**30, "gpu_free_memory": 0.0}}}})
    'GPU-1 97% 2.0 GiB'
    >>> gpu_use(None)
    ''
    """
    if not gpus:
        return ""
    cells = []
    for per_host in gpus.get("metrics", {}).values():
        for uuid, m in per_host.items():
            used = m.get("gpu_memory_used")
            cells.append(f"{uuid} {m.get('gpu_util', 0):.0f}%"
                         + (f" {used / 2**30:.1f} GiB" if used is not None else ""))
    return ", ".join(cells)


def slot_list(args: Namespace) -> int:
    """``det slot list``: one row per slot: who holds it, its GPUs' use."""
    slots = common.connect(args).request("GET", "/api/v1/slots")["slots"]
    if args.json:
        print_json(slots)
        return 0
    rows = [[s["slot"], s["task_id"] or "", s["type"] or "", s["allocation_id"] or "",
             gpu_use(s["gpus"])] for s in slots]
    print_rows(["Slot", "Task ID", "Type", "Allocation", "GPUs"], rows, args.csv)
    return 0


#: ``det slot``'s verbs (det_sdk.cli.main assembles the nouns' tables)
COMMANDS: dict[str, Any] = {
    "list": (slot_list, "the master's slots, who holds each, its GPUs' use", [CSV]),
}
