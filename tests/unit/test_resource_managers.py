"""The master's resource managers (det_sdk.master.resources) apart from Slurm itself: their
pure helpers.

Stops that outlive the master (issue 15: a kill's grace, ``det master down`` right after
a kill, a master killed with kill -9) run on a real master in this module's other half,
tests/e2e/test_resource_managers.py.
"""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["det_sdk.master.resources", "det_sdk.master.resources.slurm",
                                  "det_sdk.master.resources.slurm_step"])
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
