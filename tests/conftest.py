"""Shared test helpers: run a script in a fresh Python process, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster_harness import Cluster, running_cluster
from tests.lifecycle_harness import Fakes

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = Path(__file__).resolve().parent / "scripts"


def run_python(
    script: Path | str, env: dict[str, str], cwd: Path | None = None, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` with this interpreter and ``env`` added to the environment."""
    full_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1", **env}
    for var in ("DET_RESUME", "DET_CONFIG", "DET_ALLOCATION_ID"):
        if var not in env:
            full_env.pop(var, None)
    return subprocess.run(
        [sys.executable, str(script)], env=full_env, cwd=cwd or REPO, timeout=timeout,
        capture_output=True, text=True,
    )


@pytest.fixture(scope="session")
def mnist_npz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small MNIST-shaped .npz for examples/train.py (no download possible here)."""
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import numpy as np
        from make_mnist_npz import make
    finally:
        sys.path.pop(0)
    path = tmp_path_factory.mktemp("data") / "mnist-small.npz"
    np.savez(path, **make(n_train=512, n_test=128))
    return path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One real master per test module (starting one costs seconds)."""
    with running_cluster(tmp_path_factory.mktemp("cluster")) as c:
        yield c


@pytest.fixture(scope="module")
def fakes(cluster: Cluster) -> Fakes:
    """TensorFlow-free trials on this module's master, driven by the test."""
    return Fakes(cluster, cluster.root / "control")
