"""det.core.DistributedContext built from ranks and the chief's address (Determined's
constructor): real TCP collectives between threads of this process, and the refusals.

The test that starts two ranks as processes (no Horovod, torch or TensorFlow imported) is
in tests/e2e/test_core_distributed.py.

This module's other half, its end-to-end tests (real processes): tests/e2e/test_core_distributed.py.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import det_sdk as det
from det_sdk.core._star import CollectiveError
from det_sdk.errors import DetSdkError
from harness.master import free_port


def _ranks(size: int, body: Any, **kw: Any) -> dict[int, Any]:
    """Run ``body(ctx)`` on ``size`` ranks (threads), each with its own context."""
    port = free_port()
    out: dict[int, Any] = {}

    def one(rank: int) -> None:
        try:
            ctx = det.core.DistributedContext(
                rank=rank, size=size, local_rank=rank % 2, local_size=2, cross_rank=rank // 2,
                cross_size=(size + 1) // 2, chief_ip="127.0.0.1", pub_port=port,
                timeout_s=20, **kw)
            try:
                out[rank] = body(ctx)
            finally:
                ctx.close()
        except Exception as err:  # the assertion reads it
            out[rank] = err

    threads = [threading.Thread(target=one, args=(r,)) for r in reversed(range(size))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    return out


def test_collectives_across_four_ranks_on_two_nodes() -> None:
    def body(d: Any) -> tuple:
        return (d.allgather(d.rank * 10), d.broadcast(f"from {d.rank}"),
                d.broadcast(f"from {d.rank}", root=3), d.gather(d.rank), d.any(d.rank == 2),
                d.allgather_local(d.rank), d.gather_local(d.rank),
                d.broadcast_local(f"node {d.cross_rank} rank {d.rank}"),
                d.get_rank(), d.get_size(), d.get_local_rank(), d.get_cross_rank())

    out = _ranks(4, body)
    for rank in range(4):
        node = rank // 2
        local = [2 * node, 2 * node + 1]
        assert out[rank] == (
            [0, 10, 20, 30], "from 0", "from 3", [0, 1, 2, 3] if rank == 0 else None, True,
            local, local if rank % 2 == 0 else None, f"node {node} rank {2 * node}",
            rank, 4, rank % 2, node)


def test_a_wrong_token_is_refused_and_the_right_one_admitted() -> None:
    port = free_port()
    got: dict[str, Any] = {}

    def chief() -> None:
        d = det.core.DistributedContext(rank=0, size=2, chief_ip="127.0.0.1", pub_port=port,
                                        token="right", timeout_s=20)
        got["chief"] = d.allgather("c")
        d.close()

    t = threading.Thread(target=chief)
    t.start()
    with pytest.raises(CollectiveError, match="refused rank 1"):
        det.core.DistributedContext(rank=1, size=2, chief_ip="127.0.0.1", pub_port=port,
                                    token="wrong", timeout_s=20)
    d = det.core.DistributedContext(rank=1, size=2, chief_ip="127.0.0.1", pub_port=port,
                                    token="right", timeout_s=20)
    assert d.allgather("w") == ["c", "w"]
    d.close()
    t.join(30)
    assert got["chief"] == ["c", "w"]


def test_a_rank_that_goes_away_fails_the_others_collective() -> None:
    port = free_port()
    ready = threading.Event()
    out: dict[str, Any] = {}

    def worker() -> None:
        d = det.core.DistributedContext(rank=1, size=2, chief_ip="127.0.0.1", pub_port=port,
                                        timeout_s=20)
        ready.set()
        d.close()  # gone before the collective

    t = threading.Thread(target=worker)
    t.start()
    chief = det.core.DistributedContext(rank=0, size=2, chief_ip="127.0.0.1", pub_port=port,
                                        timeout_s=20)
    ready.wait(20)
    t.join(20)
    start = time.monotonic()
    with pytest.raises(CollectiveError, match="went away"):
        out["x"] = chief.allgather(1)
    assert time.monotonic() - start < 5
    chief.close()


def test_bad_arguments_name_the_field() -> None:
    with pytest.raises(DetSdkError, match="chief_ip is required"):
        det.core.DistributedContext(rank=0, size=2)
    with pytest.raises(DetSdkError, match=r"rank must be in \[0, size\)"):
        det.core.DistributedContext(rank=2, size=2, chief_ip="127.0.0.1")
    with pytest.raises(DetSdkError, match="size must be an int"):
        det.core.DistributedContext(rank=0, size="2", chief_ip="127.0.0.1")  # type: ignore[arg-type]
    start = time.monotonic()
    with pytest.raises(CollectiveError, match="could not reach the chief"):
        det.core.DistributedContext(rank=1, size=2, chief_ip="127.0.0.1", pub_port=free_port(),
                                    timeout_s=1)
    assert time.monotonic() - start < 10
    one = det.core.DistributedContext(rank=0, size=1)
    assert (one.allgather(1), one.broadcast(2), one.gather(3)) == ([1], 2, [3])


def test_a_chief_on_a_socket_bound_before_its_port_was_published(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A launcher binds first and publishes the bound port: the chief listens there, whatever
    the cluster's port offset (a port found free and bound later can be taken in between)."""
    from det_sdk.core._star import Star

    monkeypatch.setenv("DET_UNIQUE_PORT_OFFSET", "7")
    listener = Star.listen("127.0.0.1")
    port = listener.getsockname()[1]
    got: dict[str, Any] = {}

    def worker() -> None:
        d = det.core.DistributedContext(rank=1, size=2, chief_ip="127.0.0.1", pub_port=port,
                                        port_offset=0, token="t", timeout_s=20)
        got["worker"] = d.allgather("w")
        d.close()

    t = threading.Thread(target=worker)
    t.start()
    chief = det.core.DistributedContext(rank=0, size=2, chief_ip="127.0.0.1", token="t",
                                        timeout_s=20, listener=listener)
    assert chief.allgather("c") == ["c", "w"]
    chief.close()
    t.join(30)
    assert got["worker"] == ["c", "w"]
    with Star.listen("127.0.0.1") as stray, pytest.raises(DetSdkError,
                                                           match="listener is rank 0's"):
        det.core.DistributedContext(rank=1, size=2, chief_ip="127.0.0.1", listener=stray)
