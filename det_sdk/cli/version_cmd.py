"""``det version``: the client's version and the master's (when one answers)."""

from __future__ import annotations

import sys
from argparse import Namespace
from typing import Any

__all__ = ["version"]


def version(args: Namespace) -> int:
    """``det version``: the client's version and the master's (when one answers)."""
    import yaml

    import det_sdk
    from det_sdk.client import MasterClient, load_token

    out: dict[str, Any] = {"client": {"version": det_sdk.__version__},
                           "master": {"address": args.master}}
    try:
        client = MasterClient(args.master, load_token(args.master))
        out["master"].update(client.request("GET", "/api/v1/master"))
    except Exception as err:
        out["master"]["error"] = str(err)
    sys.stdout.write(yaml.safe_dump(out, sort_keys=False))
    return 0
