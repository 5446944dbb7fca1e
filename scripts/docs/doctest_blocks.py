"""A griffe extension for the docs site: docstring examples (``>>>`` lines and their
output) become fenced ``pycon`` blocks, so Markdown shows them as code instead of reading
``x[-1]`` as a link. The docstrings themselves stay doctests.

Used by mkdocs.yml (``extensions``); runs inside mkdocstrings, never in det_sdk.
"""

from __future__ import annotations

from typing import Any

import griffe


def fence_examples(text: str) -> str:
    """Wrap each run of ``>>>`` lines (with the output lines that follow) in a fence.

    >>> print(fence_examples("Use it:\\n\\n>>> x[-1]\\n3\\n\\nDone."))
    Use it:
    <BLANKLINE>
    ```pycon
    >>> x[-1]
    3
    ```
    <BLANKLINE>
    Done.
    """
    out: list[str] = []
    inside = False
    for line in text.splitlines():
        stripped = line.strip()
        if not inside and stripped.startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}```pycon")
            inside = True
        elif inside and not stripped:
            out.append(f"{indent}```")
            inside = False
        out.append(line)
    if inside:
        out.append(f"{indent}```")
    return "\n".join(out)


class DoctestBlocks(griffe.Extension):
    """Fence the examples of every docstring mkdocstrings renders."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = fence_examples(obj.docstring.value)
