"""Fixtures of the end-to-end tests: a real master per module, fake trials on it, and an
S3 server for a module whose runs store checkpoints in a bucket."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.master import Cluster, running_cluster
from tests.lifecycle_harness import Fakes
from tests.object_servers import started
from tests.seaweedfs import SeaweedFS

#: the bucket :func:`seaweedfs` makes
S3_BUCKET = "det-sdk-ckpts"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One real master per test module (starting one costs seconds)."""
    with running_cluster(tmp_path_factory.mktemp("cluster")) as c:
        yield c


@pytest.fixture(scope="module")
def fakes(cluster: Cluster) -> Fakes:
    """TensorFlow-free trials on this module's master, driven by the test."""
    return Fakes(cluster, cluster.root / "control")


@pytest.fixture(scope="module")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    """A real S3 server (SeaweedFS) for the module, with bucket :data:`S3_BUCKET`; its
    ``checkpoint_storage(S3_BUCKET, prefix)`` is a config that names it."""
    pytest.importorskip("obstore")
    with started("s3", tmp_path_factory, S3_BUCKET) as server:
        yield server
