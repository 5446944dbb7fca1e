"""Every docstring example in det_sdk (and in harness/ and tests/support.py, which the
tests and benchmarks share) runs as a test: modules are found, not listed, so a new
module's examples run from the day it is written. An example that cannot run here
(it needs a user's data or a cluster) is written as a plain code block instead (``::``).
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import det_sdk
import harness

# The frameworks' fronts run where their framework is installed (torch is not in the
# Keras 2 environment), and so does torch's process group; `python -m` entry modules are
# not imported. (det_sdk.collectives.jax's examples need no JAX: they run everywhere.) The
# JAX and PyTorch engine is Keras 3's (its examples run under this process's TensorFlow
# backend, as its code is backend-neutral).
_OPTIONAL = {"det_sdk.pytorch": ("torch", None), "det_sdk.keras": ("tensorflow", None),
             "det_sdk.collectives.torch": ("torch", None),
             "det_sdk.keras._neutral": ("keras", "3")}


def _modules() -> list[str]:
    names = [m.name for m in pkgutil.walk_packages(det_sdk.__path__, "det_sdk.")
             if not m.name.endswith("__main__")]
    shared = [m.name for m in pkgutil.walk_packages(harness.__path__, "harness.")]
    return sorted(["det_sdk", *names, *shared, "tests.support"])


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples(name: str) -> None:
    for prefix, (framework, version) in _OPTIONAL.items():
        if name == prefix or name.startswith(prefix + "."):
            pytest.importorskip(framework, minversion=version)
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"
