"""Shared test helpers: run a script in a fresh Python process, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from det_sdk.env import outside
from harness.master import Cluster, running_cluster
from tests.lifecycle_harness import Fakes

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = Path(__file__).resolve().parent / "scripts"


def run_python(
    script: Path | str, env: dict[str, str], cwd: Path | None = None, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` with this interpreter and ``env`` added to the environment."""
    full_env = outside(keep=["DET_RUNS_DIR"], TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1",
                       **env)
    return subprocess.run(
        [sys.executable, str(script)], env=full_env, cwd=cwd or REPO, timeout=timeout,
        capture_output=True, text=True,
    )


@pytest.fixture(scope="session")
def mnist_npz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small MNIST-shaped .npz for examples/train.py (no download possible here)."""
    import numpy as np

    from harness.mnist import make

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


# The fast set (`-m "not slow"`) starts no process: a test that does (a master,
# horovodrun, a training script, a browser) must be marked slow. Enforced here rather
# than remembered: any process started while a test not marked slow is being set up
# or run fails that test, naming the command. Teardown is not watched: a module's
# master (or Slurm) fixture, started by a slow test, stops in the teardown of the
# module's last test, which may be a fast one. DET_TEST_SPAWNS=<file> records
# the offenders instead (one line per test) to survey a suite.
_current: list[pytest.Item] = []
# fixtures that start processes: a test using one is slow without having to say so
_SPAWNING_FIXTURES = {"cluster", "fakes"}


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _SPAWNING_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


def pytest_runtest_setup(item: pytest.Item) -> None:
    _current[:] = [item]


def pytest_runtest_teardown(item: pytest.Item) -> None:
    _current.clear()


# probes libraries run for themselves, not processes a test starts: numpy 1.x's
# numpy.testing runs `lscpu` when first imported (TF 2.15 imports it lazily), and
# platform.processor() runs `uname -p` the first time something asks (cached after)
_LIBRARY_PROBES = {"lscpu", "uname"}


def _check_spawn(what: object) -> None:
    item = _current[0] if _current else None
    if item is None or item.get_closest_marker("slow") is not None:
        return
    argv0 = what if isinstance(what, str) else next(iter(what), "")  # type: ignore[call-overload]
    if os.path.basename(str(argv0).split()[0] if argv0 else "") in _LIBRARY_PROBES:
        return
    record = os.environ.get("DET_TEST_SPAWNS")
    if record:
        with open(record, "a") as out:
            out.write(f"{item.nodeid}\t{str(what)[:200]}\n")
        return
    raise AssertionError(f"a test outside the slow set started a process ({what!r}): "
                         "mark it @pytest.mark.slow (the fast set starts none)")


_real_popen_init = subprocess.Popen.__init__


def _guarded_popen_init(self: subprocess.Popen, args: object, *rest: object,
                        **kwargs: object) -> None:
    _check_spawn(args)
    _real_popen_init(self, args, *rest, **kwargs)  # type: ignore[arg-type]


subprocess.Popen.__init__ = _guarded_popen_init  # type: ignore[method-assign]
