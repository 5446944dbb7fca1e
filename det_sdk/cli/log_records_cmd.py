"""``det trial logs`` / ``det experiment logs`` with Determined 0.38's filters (issue 60):
``--rank-id``, ``--level`` (also ``--log-level``), ``--source``, ``--stdtype``,
``--timestamp-before``/``--timestamp-after``, with ``--head``/``--tail``/``-f``, and
``--json`` printing Determined's records (``v1TrialLogsResponse``) one per line.

Without a filter or ``--json`` the log prints as before (``det_sdk.cli.logs_cmd``: the
text the task wrote, byte for byte). With one, each kept line prints as the task wrote it
(Determined prints its ``message``, which adds ``[time] [rank=N] || LEVEL:`` before it:
``--json`` gives both).

>>> from argparse import Namespace
>>> filters_of(Namespace(rank_ids=[1], level="WARNING", sources=None, stdtypes=None,
...                      timestamp_before=None, timestamp_after=None))
{'rank_ids': [1], 'levels': ['LOG_LEVEL_WARNING', 'LOG_LEVEL_ERROR', 'LOG_LEVEL_CRITICAL']}
"""

from __future__ import annotations

import json
import sys
from argparse import Namespace
from typing import Any

from det_sdk.cli.argtypes import whole_number
from det_sdk.cli.common import refused
from det_sdk.cli.logs_cmd import print_log
from det_sdk.log_query import LEVELS, levels_at_or_above, record_params
from det_sdk.log_stream import DETERMINED_KEYS, iter_records

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["RECORD_OPTIONS", "filters_of", "print_trial_log"]

ENDED = ("COMPLETED", "CANCELED", "ERROR")
_non_negative = whole_number(0)
_LEVEL_NAMES = [n[len("LOG_LEVEL_"):] for n in LEVELS]

#: Determined's log options (harness/determined/cli/trial.py's logs_args_description)
RECORD_OPTIONS: list[tuple[Any, ...]] = [
    (("-f", "--follow"), {"action": "store_true",
                          "help": "print the log as it grows, until the trial ends"}),
    ("--head", {"type": _non_negative, "metavar": "N", "help": "the first N lines"}),
    ("--tail", {"type": _non_negative, "metavar": "N", "help": "the last N lines"}),
    ("--json", {"action": "store_true",
                "help": "Determined's log records (timestamp, rank, level, source, stdtype) "
                        "as JSON, one a line"}),
    (("--rank-id",), {"dest": "rank_ids", "type": int, "action": "append", "metavar": "RANK",
                      "help": "only these ranks (repeat for several)"}),
    ("--timestamp-before", {"help": "only lines from before (RFC 3339, e.g. "
                                    "2021-10-26T23:17:12Z)"}),
    ("--timestamp-after", {"help": "only lines from after (RFC 3339)"}),
    (("--level", "--log-level"), {"dest": "level", "choices": _LEVEL_NAMES,
                                  "help": "only lines of this level or higher"}),
    (("--source",), {"dest": "sources", "action": "append",
                     "help": "only lines from these sources: task, master (repeat)"}),
    (("--stdtype",), {"dest": "stdtypes", "action": "append",
                      "help": "only lines of these streams: stdout, stderr (repeat)"}),
    *((flag, refused("det_sdk runs a trial's processes on the master's own machine or "
                     "under Slurm, not in agents' containers: filter by --rank-id",
                     takes_value=True))
      for flag in ("--agent-id", "--container-id")),
]


def filters_of(args: Namespace) -> dict[str, Any]:
    """The record filters ``args`` give (empty: none)."""
    return record_params(
        rank_ids=args.rank_ids,
        levels=levels_at_or_above(args.level) if args.level else None,
        stdtypes=args.stdtypes, sources=args.sources,
        timestamp_before=args.timestamp_before, timestamp_after=args.timestamp_after)


def print_trial_log(client: Any, trial_id: int, state: Callable[[], str],
                    args: Namespace) -> None:
    """Print trial ``trial_id``'s log as ``args`` ask (see the module's docstring)."""
    filters = filters_of(args)
    if not filters and not args.json:
        print_log(client, "trials", trial_id, state, args)
        return

    def fetch(params: dict[str, Any]) -> dict[str, Any]:
        return dict(client.request("GET", f"/api/v1/trials/{trial_id}/logs/records",
                                   params=params))

    for rec in iter_records(fetch, filters, head=args.head, tail=args.tail,
                            follow=args.follow, ended=lambda: state() in ENDED):
        if args.json:
            sys.stdout.write(json.dumps({k: rec.get(k) for k in DETERMINED_KEYS}) + "\n")
        else:
            sys.stdout.write(rec["raw"])
        sys.stdout.flush()
