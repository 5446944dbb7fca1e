"""What each Keras backend's engine imports (issue 57), in real processes
(tests/scripts/backend_imports.py), all three started at once:

- on JAX and on PyTorch, ``det.keras.init()`` and one epoch of ``context.fit`` (with its
  checkpoint) run where TensorFlow and Horovod are absent, as in an environment installed
  with ``pip install 'det_sdk[jax]'`` or ``'det_sdk[torch]'``: the script hides them (this
  venv has both, and Keras 3 imports TensorFlow wherever it is installed:
  ``keras.utils.set_random_seed`` seeds it too). det_sdk's own code tries to import
  neither, nor the other backend's framework;
- on TensorFlow, ``import det_sdk.keras`` imports no framework (its TensorFlow names are
  lazy), and ``det.keras.init()`` imports TensorFlow.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO, SCRIPTS, keras3_installed, run_python

SCRIPT = SCRIPTS / "backend_imports.py"
OTHER = {"jax": "torch", "torch": "jax"}  # each neutral backend, and the other's framework



@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.CompletedProcess[str]]:
    """backend -> its finished process: the ones installed here, run side by side."""
    tmp = tmp_path_factory.mktemp("backend-imports")
    # this checkout's det_sdk first on the path, as launched_env does
    envs = {"tensorflow": {"PYTHONPATH": str(REPO), "KERAS_BACKEND": "tensorflow",
                           "BACKEND_IMPORTS_RUNS_DIR": str(tmp / "tensorflow")}}
    for backend in OTHER:
        if keras3_installed() and importlib.util.find_spec(backend) is not None:
            envs[backend] = {"PYTHONPATH": str(REPO), "KERAS_BACKEND": backend,
                             "BACKEND_IMPORTS_HIDE": "tensorflow,horovod",
                             "BACKEND_IMPORTS_FIT": "1",
                             "BACKEND_IMPORTS_RUNS_DIR": str(tmp / backend)}
    with ThreadPoolExecutor(len(envs)) as pool:
        done = pool.map(lambda env: run_python(SCRIPT, env, timeout=120), envs.values())
        return dict(zip(envs, done))


def _report(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    found = re.search(r"^BACKEND_IMPORTS (\{.*\})$", proc.stdout, re.MULTILINE)
    assert found, out[-4000:]
    report: dict[str, Any] = json.loads(found.group(1))
    return report


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_jax_and_pytorch_train_without_tensorflow_or_horovod(
        backend: str, runs: dict[str, subprocess.CompletedProcess[str]]) -> None:
    if backend not in runs:
        pytest.skip(f"{backend} with Keras 3 not installed")
    report = _report(runs[backend])
    assert report["backend"] == backend
    for stage in ("after_import", "after_init", "after_fit"):
        loaded = report[stage]
        assert not loaded["tensorflow"] and not loaded["horovod"], (stage, report)
    # imports det_sdk's own files made (Keras's, and torch's, are Keras's and torch's business:
    # Keras 3 on PyTorch imports JAX where it is installed, for its Orbax callback)
    assert not set(report["by_det_sdk"]) & {"tensorflow", "horovod", OTHER[backend]}, report
    print(f"{backend}: {OTHER[backend]} loaded: {report['after_fit'][OTHER[backend]]}; "
          f"attempts: {[(a['name'], Path(a['by']).name) for a in report['attempts']]}")


def test_tensorflow_is_imported_by_init_not_by_import_det_sdk_keras(
        runs: dict[str, subprocess.CompletedProcess[str]]) -> None:
    report = _report(runs["tensorflow"])
    assert report["backend"] == "tensorflow"
    assert not any(report["after_import"].values()), report  # no framework, not even Keras
    assert report["after_init"]["tensorflow"], report
