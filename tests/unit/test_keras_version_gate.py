"""Which Keras runs is asked in one place (issue 39): ``det_sdk/keras/_compat/_impl.py``
picks ``_keras3`` or ``_keras2``; the rest of ``_compat`` calls them, and outside it only
the two readers docs/design.md names look at the version. Read as text: no TensorFlow."""

from __future__ import annotations

import re
from pathlib import Path

import det_sdk

KERAS = Path(det_sdk.__file__).resolve().parent / "keras"
COMPAT = KERAS / "_compat"
_ASKS = re.compile(r"\b(?:KERAS_MAJOR|MULTI_WORKER_FIT|_K3)\b")
_CODE = re.compile(r"^\s*(?!#|>>>)")


def _asking(path: Path) -> list[int]:
    return [n for n, line in enumerate(path.read_text().splitlines(), 1)
            if _ASKS.search(line) and _CODE.match(line)]


def test_the_compat_package_picks_the_keras_once() -> None:
    inside = {p.name: _asking(p) for p in sorted(COMPAT.glob("*.py"))}
    asking = sorted(name for name, lines in inside.items() if lines)
    # _version.py finds the version, _impl.py picks, __init__.py re-exports it
    assert asking == ["__init__.py", "_impl.py", "_version.py"], inside
    for name in ("_keras2.py", "_keras3.py"):
        assert "_version import keras\n" in (COMPAT / name).read_text()


def test_outside_compat_only_the_checkpoint_and_the_strategy_read_the_version() -> None:
    outside = sorted(str(p.relative_to(KERAS)) for p in KERAS.rglob("*.py")
                     if COMPAT not in p.parents and _asking(p))
    assert outside == ["_checkpoint.py", "_strategy.py"]
