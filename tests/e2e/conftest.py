"""Fixtures of the end-to-end tests: a real master per module, and fake trials on it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.master import Cluster, running_cluster
from tests.lifecycle_harness import Fakes


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One real master per test module (starting one costs seconds)."""
    with running_cluster(tmp_path_factory.mktemp("cluster")) as c:
        yield c


@pytest.fixture(scope="module")
def fakes(cluster: Cluster) -> Fakes:
    """TensorFlow-free trials on this module's master, driven by the test."""
    return Fakes(cluster, cluster.root / "control")
