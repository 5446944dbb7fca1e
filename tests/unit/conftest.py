"""The unit folder's rule: its tests load no heavy framework (checked, not hoped for).

A unit test that imports TensorFlow, PyTorch or FastAPI (directly or through det_sdk)
fails, naming the module: it belongs in tests/integration/. The check sees a first
import only, so the unit tests run first (pyproject.toml's testpaths) and alone
(`bash scripts/test.sh tests/unit`) before anything else has loaded one.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

HEAVY = ("tensorflow", "torch", "fastapi")


@pytest.fixture(autouse=True)
def _loads_no_framework(request: pytest.FixtureRequest) -> Iterator[None]:
    before = {m for m in HEAVY if m in sys.modules}
    yield
    loaded = sorted(m for m in HEAVY if m in sys.modules and m not in before)
    if loaded:
        pytest.fail(f"{request.node.nodeid} imported {', '.join(loaded)}: a unit test loads "
                    "no framework; move it to tests/integration/", pytrace=False)
