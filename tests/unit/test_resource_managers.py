"""The master's resource managers (det_sdk.master.resources) apart from Slurm itself:
their pure helpers, and stops that outlive the master (issue 15).

A kill is a SIGTERM now and a forced stop after the grace. The deadline is recorded on
the allocation, so neither ``det master down`` right after a kill nor a master killed
with kill -9 leaves the task running: the master carries out the stops it promised
before it exits, and a master started after a crash carries out the ones it finds.
The trial here ignores SIGTERM, as a script stuck in a long native call does.

This module's other half, its end-to-end tests (real processes):
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
