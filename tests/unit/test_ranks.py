"""det_sdk.ranks (issue 39): one module per launch environment reads who this process is
among how many; nothing else in det_sdk reads a launcher's rank variables."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import det_sdk
from det_sdk import env, ranks
from det_sdk.distributed import Processes, SingleProcess
from det_sdk.errors import DetSdkError
from det_sdk.ranks import Ranks, horovodrun, mpirun, slurm, tf_config, torchrun

PACKAGE = Path(det_sdk.__file__).resolve().parent

#: the rank variables (env.RANK_VARS, its prefixes, and the few each launcher adds)
_RANK_NAMES = (*env.RANK_VARS, "TORCHELASTIC_RESTART_COUNT", "SLURM_PROCID", "SLURM_LOCALID",
               "SLURM_NODEID", "SLURM_NTASKS")
_RANK_PREFIXES = ("HOROVOD_", "OMPI_", "PMI_")
#: where else rank variables are read, and why: the master's Slurm step turns Slurm's ranks
#: into horovodrun's for the trial's processes it starts (the launcher's side)
_ALSO_READ_IN = {"master/resources/slurm_step.py"}


def _is_rank_var(name: str) -> bool:
    return name in _RANK_NAMES or name.startswith(_RANK_PREFIXES)


def _environ_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, name)`` of each ``environ[...]``/``env[...]``/``.get(...)``/``getenv(...)``
    of a literal name (docstrings' examples are strings, not reads)."""
    found = []
    for node in ast.walk(tree):
        key: ast.AST | None = None
        if isinstance(node, ast.Subscript):
            key = node.slice
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("get", "getenv", "pop"):
                key = node.args[0]
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            found.append((node.lineno, key.value))
    return found


def test_only_the_ranks_package_reads_rank_variables() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(("ranks/", "_compat_path/")) or rel in _ALSO_READ_IN:
            continue
        found += [f"{rel}:{line} {name}" for line, name in
                  _environ_reads(ast.parse(path.read_text())) if _is_rank_var(name)]
    assert not found, f"rank variables read outside det_sdk.ranks: {found}"
    assert _environ_reads(ast.parse('os.environ.get("HOROVOD_RANK")')) == [(1, "HOROVOD_RANK")]


def test_each_launcher_reads_its_own_variables() -> None:
    hvd = horovodrun.read({"HOROVOD_RANK": "3", "HOROVOD_SIZE": "4", "HOROVOD_LOCAL_RANK": "1",
                           "HOROVOD_LOCAL_SIZE": "2", "HOROVOD_CROSS_RANK": "1",
                           "HOROVOD_CROSS_SIZE": "2"})
    assert hvd == Ranks(rank=3, size=4, local_rank=1, local_size=2, cross_rank=1, cross_size=2,
                        launcher="horovodrun")
    assert horovodrun.read({"HOROVOD_RANK": "0", "HOROVOD_SIZE": ""}) is None

    torch = torchrun.read({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1",
                           "MASTER_PORT": "29500"})
    assert torch is not None and (torch.rank, torch.size, torch.local_size, torch.cross_size,
                                  torch.chief_addr, torch.chief_port) == (
        1, 2, 2, 1, "10.0.0.1", 29500)
    assert torchrun.read({"RANK": "1"}) is None

    workers = ["a:1", "b:1", "a:2"]
    tf = tf_config.read({"TF_CONFIG": tf_config_json(workers, 2),
                         "DET_TF_COLLECTIVE_ADDR": "a:9"})
    assert tf == Ranks(rank=2, size=3, local_rank=1, local_size=2, cross_rank=0, cross_size=2,
                       chief_addr="a", chief_port=9, launcher="tf_config")
    with pytest.raises(DetSdkError, match="TF_CONFIG: task must be a worker"):
        tf_config.read({"TF_CONFIG": '{"cluster": {"worker": ["a:1"]}, "task": {"index": 2}}'})

    assert slurm.read({"SLURM_JOB_ID": "5"}) is None
    assert mpirun.read({"OMPI_COMM_WORLD_RANK": "0"}) is None


def tf_config_json(workers: list[str], index: int) -> str:
    import json

    return json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})


def test_which_picks_among_the_launchers_in_the_order_asked() -> None:
    both = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1",
            "HOROVOD_RANK": "1", "HOROVOD_SIZE": "2"}
    assert ranks.which(both).launcher == "torchrun"
    assert ranks.which(both, among=("horovodrun", "torchrun")).rank == 1
    assert ranks.which({"PATH": "/bin"}) == Ranks(rank=0, size=1, local_rank=0, local_size=1,
                                                   cross_rank=0, cross_size=1)
    assert ranks.rank_hint({"OMPI_COMM_WORLD_RANK": "3", "RANK": "1"}) == 3


def test_ranks_are_frozen() -> None:
    r = ranks.which({})
    with pytest.raises(AttributeError, match="frozen"):
        r.rank = 1  # type: ignore[misc]
    assert r.is_chief and hash(r) == hash(ranks.which({}))


def test_the_base_of_contexts_is_processes_and_det_core_keeps_the_public_name() -> None:
    assert not hasattr(det_sdk.distributed, "DistributedContext")  # one class of that name
    assert isinstance(SingleProcess(), det_sdk.core.DistributedContext)
    assert det_sdk.core.DistributedContext.__mro__[1] is Processes
