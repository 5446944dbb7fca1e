"""The suite's fixtures and the rule of its folders (helpers modules import: tests/support.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support import TESTS


@pytest.fixture(scope="session")
def mnist_npz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small MNIST-shaped .npz for examples/train.py (no download possible here)."""
    import numpy as np

    from harness.mnist import make

    path = tmp_path_factory.mktemp("data") / "mnist-small.npz"
    np.savez(path, **make(n_train=512, n_test=128))
    return path


@pytest.fixture(scope="session")
def npz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The PyTorch example's small MNIST-shaped .npz (tests/pytorch_mnist/make_data.py)."""
    import sys

    sys.path.insert(0, str(TESTS / "pytorch_mnist"))
    try:
        import make_data
    finally:
        sys.path.pop(0)
    path = tmp_path_factory.mktemp("pt") / "mnist8.npz"
    make_data.make(str(path))
    return path


# Tests are filed by cost (tests/README.md): tests/unit and tests/integration start no
# process, tests/e2e starts masters, horovodrun, training scripts, Slurm and browsers.
# The `slow` mark comes with the folder, not from memory: every test under tests/e2e is
# slow (`-m "not slow"` is unit + integration). That those two start no process is
# enforced, not hoped for: a process started while one of their tests is being set up or
# run fails that test, naming the command and where the test belongs. Teardown is not
# watched (a fixture may stop what it started). DET_TEST_SPAWNS=<file> records the
# offenders instead (one line per test) to survey a suite.
_current: list[pytest.Item] = []
E2E = TESTS / "e2e"


# A module whose outcome cannot depend on the Keras stack (the master, the CLI, the UI,
# Slurm, the searchers: Keras, if it runs there at all, is only the workload) says so with
# `pytestmark = pytest.mark.stack_neutral`. scripts/test.sh names the stack it tests in
# DET_TEST_STACK; on the second one (keras2) such tests are deselected: they ran on the
# default stack, and again they would cost CI a third of its time to test nothing new.
# Unmarked is the safe default: it runs on both.
SECOND_STACKS = {"keras2"}


# scripts/test.sh runs tests/integration and tests/e2e 4 at a time (pytest-xdist, `-n 4
# --dist loadfile --no-loadscope-reorder`): whole files go to the workers, in collection
# order, as workers free up. The files that take longest go first, so that none of them
# starts late and runs alone at the end. A file not listed keeps its place after them;
# one at a time (no xdist) nothing is reordered.
#
# Among them, files that mostly wait (on masters, Slurm, JupyterLab, restarts: CPU under
# 0.4 of their wall time) alternate with files that mostly compute (horovodrun's
# TensorFlow ranks), each kind longest first: until round 6 the four that started were
# all waiters (test_cluster, test_cluster_faults, test_ui, test_slurm), and the first
# 330 s of a fresh clone's Keras 3 pass used 0.2-0.6 of the 2 cores (round 6 stop 5's
# clone, its DET_TEST_CPU record: docs/benchmarks.md, Tests).
LONGEST_FIRST = [
    # (waiter, computer) pairs
    "test_slurm.py", "test_horovod.py",
    "test_cluster_faults.py", "test_keras_backends.py",
    "test_notebooks.py", "test_mixed_precision.py",
    "test_cluster.py", "test_pytorch_cluster.py",
    "test_local_training.py", "test_slurm_backends.py",
    "test_object_stores.py", "test_core_callback.py",
    "test_lifecycle_stateful.py", "test_same_on_n.py",
    "test_checkpoint_writes.py", "test_keras_backends_state.py",
    "test_ui.py", "test_stages.py",
    "test_master_openapi.py", "test_forecaster.py",
    "test_commands.py", "test_search.py",
    "test_huge_checkpoint.py", "test_pytorch.py",
    "test_job_steering.py", "test_keras_io_shapes.py",
    "test_security.py", "test_custom_models.py",
    "test_predict_stream.py",
]


def _longest_first(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}

    def key(item: pytest.Item) -> int:
        path = Path(str(item.path))
        return rank.get(path.name, len(rank)) if path.parent == E2E else len(rank)

    items.sort(key=key)  # stable: a file's tests keep their order


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if E2E in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.slow)
    if os.environ.get("PYTEST_XDIST_WORKER"):  # collected by a worker of pytest-xdist
        _longest_first(items)
    if os.environ.get("DET_TEST_STACK") in SECOND_STACKS:
        neutral = [i for i in items if i.get_closest_marker("stack_neutral") is not None]
        if neutral:
            config.hook.pytest_deselected(items=neutral)
            items[:] = [i for i in items if i.get_closest_marker("stack_neutral") is None]


def pytest_runtest_setup(item: pytest.Item) -> None:
    _current[:] = [item]


def pytest_runtest_teardown(item: pytest.Item) -> None:
    _current.clear()


# On 2 cores the suite is bound by CPU, not by waiting: CI's time is the CPU its tests
# spend, and --durations (wall time under load) does not say whose that is.
# DET_TEST_CPU=<file> appends one JSON line per test: its wall time and the CPU of this
# process and of the processes it reaped while the test ran (masters, trials, horovodrun
# and their ranks: a child's CPU counts once it is reaped, with its own reaped children),
# so a module's master counts in the test whose teardown stops it. A daemon (`det master
# up`) is reaped by nobody: scripts/cpu_probe makes each Python process report its own.
# `python scripts/test_cpu_report.py <file>` sums them by file.
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    record = os.environ.get("DET_TEST_CPU")
    if not record:
        yield
        return
    import json
    import resource
    import time

    def cpu() -> tuple[float, float]:
        me = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime

    # every Python process started while the test runs (a daemon master's trials too)
    # writes its own CPU under this directory at exit (scripts/cpu_probe); the report
    # reads them afterwards, since a module's master exits after its last test
    stack = os.environ.get("DET_TEST_STACK") or "keras3"  # one record may hold both stacks
    tree = Path(record + ".d") / stack / item.nodeid.replace("/", "~")
    tree.mkdir(parents=True, exist_ok=True)
    os.environ["DET_TEST_CPU_DIR"] = str(tree)
    start, (me0, kids0) = time.monotonic(), cpu()
    yield
    me1, kids1 = cpu()
    with open(record, "a") as out:
        # start (epoch s) and worker: the run's timeline, to see which files end a stack alone
        out.write(json.dumps({"test": item.nodeid, "wall": round(time.monotonic() - start, 2),
                              "start": round(time.time() - (time.monotonic() - start), 1),
                              "worker": os.environ.get("PYTEST_XDIST_WORKER", ""),
                              "stack": stack,
                              "cpu_self": round(me1 - me0, 2),
                              "cpu_children": round(kids1 - kids0, 2)}) + "\n")


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
    raise AssertionError(f"a test outside tests/e2e started a process ({what!r}): move it to "
                         "tests/e2e/ (tests/unit and tests/integration start none)")


_real_popen_init = subprocess.Popen.__init__


def _guarded_popen_init(self: subprocess.Popen, args: object, *rest: object,
                        **kwargs: object) -> None:
    _check_spawn(args)
    _real_popen_init(self, args, *rest, **kwargs)  # type: ignore[arg-type]


subprocess.Popen.__init__ = _guarded_popen_init  # type: ignore[method-assign]
