"""The examples in the docstrings of the modules that can run them here are run as tests."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "det_sdk.config", "det_sdk.hparams", "det_sdk.info", "det_sdk.session",
    "det_sdk.storage", "det_sdk.api", "det_sdk.master.searchers", "det_sdk.master.store",
    "det_sdk.master.archive", "det_sdk.keras._plan", "det_sdk.keras._callbacks",
    "det_sdk.keras._compat", "det_sdk.master.security", "det_sdk.master.ui.routes",
    "det_sdk.keras._callback_state", "det_sdk.wire",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples to run"
    assert result.failed == 0
