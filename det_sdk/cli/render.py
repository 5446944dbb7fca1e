"""Output for people (tables, progress) and for scripts (``--json``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

TYPE_CHECKING = False  # typing and json are imported when used, not for `det --help`
if TYPE_CHECKING:
    from typing import Any

__all__ = ["escape", "page_footer", "print_json", "print_rows", "progress_bar", "table"]

# C0 controls, DEL and C1 controls: what a terminal acts on (ESC starts colour, title and
# cursor sequences; BEL rings; CR overwrites the line)
_CONTROL = {*range(0x20), 0x7F, *range(0x80, 0xA0)}
_ESCAPES = {c: f"\\x{c:02x}" for c in _CONTROL}
_MULTILINE = {c: v for c, v in _ESCAPES.items() if c not in (0x0A, 0x09)}


def escape(text: object, multiline: bool = False) -> str:
    r"""``text`` as the CLI prints what the master holds (names, errors, metric names):
    control characters written out visibly (``\x1b``), so that a name cannot drive the
    terminal; ``multiline`` keeps newlines and tabs (an error's traceback).

    >>> print(escape("exp\x1b[31mred\x07"))
    exp\x1b[31mred\x07
    >>> escape("a\nb\tc", multiline=True) == "a\nb\tc", escape("a\nb")
    (True, 'a\\x0ab')
    """
    return str(text).translate(_MULTILINE if multiline else _ESCAPES)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table with columns as wide as their widest cell.

    >>> print(table(["ID", "STATE"], [[1, "RUNNING"]]))
    ID  STATE
    1   RUNNING
    """
    cells = [[("" if c is None else escape(c)) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h)
              for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(lines)


def print_rows(headers: Sequence[str], rows: Sequence[Sequence[Any]], as_csv: bool) -> None:
    """Print ``rows`` as :func:`table` does, or as CSV with a header line (``--csv``).

    >>> print_rows(["ID", "STATE"], [[1, "RUNNING"]], as_csv=False)
    ID  STATE
    1   RUNNING
    """
    if not as_csv:
        print(table(headers, rows))
        return
    import csv

    w = csv.writer(sys.stdout)
    w.writerow(headers)
    w.writerows(rows)


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
