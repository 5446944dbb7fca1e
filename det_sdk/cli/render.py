"""Output for people (tables, progress) and for scripts (``--json``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

TYPE_CHECKING = False  # typing and json are imported when used, not for `det --help`
if TYPE_CHECKING:
    from typing import Any

__all__ = ["page_footer", "print_json", "progress_bar", "table"]


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table with columns as wide as their widest cell.

    >>> print(table(["ID", "STATE"], [[1, "RUNNING"]]))
    ID  STATE
    1   RUNNING
    """
    cells = [[("" if c is None else str(c)) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h)
              for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(lines)


def page_footer(shown: int, total: int, what: str, newest: bool = True) -> str | None:
    """The line under a table that shows part of a list (None when it shows all of it).

    >>> page_footer(20, 1234, "experiments")
    'showing the newest 20 of 1234 experiments; --all for everything'
    >>> page_footer(3, 3, "jobs") is None
    True
    """
    if shown >= total:
        return None
    which = "the newest " if newest else "the first "
    return f"showing {which}{shown} of {total} {what}; --all for everything"


def print_json(obj: Any) -> None:
    import json

    print(json.dumps(obj, indent=2, default=str))


def progress_bar(label: str) -> Any:
    """A callback ``(done, total)`` drawing a progress bar on stderr (when it is a terminal)."""
    interactive = sys.stderr.isatty()

    def draw(done: int, total: int) -> None:
        if not total:
            return
        frac = done / total
        if interactive:
            bar = "#" * int(frac * 30)
            sys.stderr.write(f"\r{label} [{bar:<30}] {done / 1e6:.1f}/{total / 1e6:.1f} MB")
            if done >= total:
                sys.stderr.write("\n")
            sys.stderr.flush()
        elif done >= total:
            print(f"{label}: {total / 1e6:.1f} MB sent", file=sys.stderr)

    return draw
