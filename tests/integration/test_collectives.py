"""det_sdk.collectives.jax in this process: what it refuses before any rank meets, the ranks'
agreement to start JAX's runtime all or none (two ranks as threads, a dict as their store),
and the coordinator's port held until JAX binds it. Real processes under real launchers:
tests/e2e/test_collectives_jax.py.
"""

from __future__ import annotations

import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from det_sdk.collectives._rendezvous import DistributedSetupError
from det_sdk.errors import DetSdkError
from harness.master import free_port

jax_ranks = pytest.importorskip("det_sdk.collectives.jax")
pytest.importorskip("jax")


class DictStore:
    """A key-value store shared by threads (what torchrun's or horovodrun's is to processes)."""

    def __init__(self, timeout: float) -> None:
        self.values: dict[str, str] = {}
        self.changed = threading.Condition()
        self.timeout = timeout

    def set(self, key: str, value: str) -> None:
        with self.changed:
            self.values[key] = value
            self.changed.notify_all()

    def get(self, key: str) -> str:
        with self.changed:
            if not self.changed.wait_for(lambda: key in self.values, self.timeout):
                raise DistributedSetupError(f"{key} never came")
            return self.values[key]


def test_from_env_says_what_is_missing_before_any_rank_meets() -> None:
    JaxDistributed = jax_ranks.JaxDistributed
    with pytest.raises(DistributedSetupError, match="no ranks in the environment"):
        JaxDistributed.from_env(environ={"PATH": "/bin"})
    with pytest.raises(DistributedSetupError, match="MASTER_ADDR/MASTER_PORT are not"):
        JaxDistributed.from_env(environ={"RANK": "0", "WORLD_SIZE": "2"})
    with pytest.raises(DistributedSetupError, match="HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT"):
        JaxDistributed.from_env(environ={"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2"})
    with pytest.raises(DistributedSetupError, match="DET_JAX_TIMEOUT must be a positive"):
        JaxDistributed.from_env(environ={"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2",
                                         "DET_JAX_TIMEOUT": "0"})
    assert jax_ranks.setup_timeout({"DET_JAX_TIMEOUT": "7", "DET_COLLECTIVE_TIMEOUT": "9"}) == 7
    assert jax_ranks.setup_timeout({"DET_COLLECTIVE_TIMEOUT": "0"}) == 60  # 0: no bound there
    assert issubclass(DistributedSetupError, DetSdkError)
    one = JaxDistributed.from_env(environ={"RANK": "0", "WORLD_SIZE": "1",
                                           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"})
    assert (one.rank, one.size, one.coordinator, one.broadcast("x")) == (0, 1, None, "x")
    one.close()


def test_a_rank_that_cannot_start_jax_stops_every_rank_with_the_same_reason() -> None:
    """Rank 1 sees one GPU for two local ranks: neither rank starts JAX's runtime (rank 0
    alone would wait in JAX's coordinator, which ends the process when a peer is missing);
    both raise, naming rank 1 and its reason."""
    store = DictStore(timeout=20)

    def rank(r: int) -> BaseException | None:
        try:
            jax_ranks.JaxDistributed(rank=r, size=2, local_rank=r, local_size=2,
                                     chief_ip="127.0.0.1", store=store, timeout_s=20,
                                     gpus=2 if r == 0 else 1)
        except BaseException as err:
            return err
        return None

    with ThreadPoolExecutor(2) as pool:
        errors = list(pool.map(rank, [0, 1]))
    for err in errors:
        assert isinstance(err, DistributedSetupError), errors
        assert "cannot start on every rank, so no rank starts it" in str(err)
        assert "rank 1: det_sdk: 2 processes on this machine, but it shows 1 GPU" in str(err)
    assert str(errors[0]) == str(errors[1])
    import jax

    assert not jax.distributed.is_initialized()


def test_the_coordinators_port_is_held_for_jax_alone_and_a_taken_one_is_named() -> None:
    port = free_port()
    held, bind = jax_ranks._hold_port(True, port)
    try:
        assert bind == f"127.0.0.1:{port}"
        with pytest.raises(OSError), socket.create_server(("127.0.0.1", port)):
            pass  # another process's plain bind fails while det_sdk holds the port
        with socket.socket() as grpc_like:  # gRPC's (SO_REUSEPORT, this user) succeeds
            grpc_like.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            grpc_like.bind(("127.0.0.1", port))
            grpc_like.listen()
    finally:
        held.close()
    with socket.create_server(("127.0.0.1", port)), \
            pytest.raises(DistributedSetupError, match=rf"cannot bind port {port} on 127\.0\.0\.1"):
        jax_ranks._hold_port(True, port)
    address, bind, held = jax_ranks._reserve_coordinator("localhost")
    held.close()
    assert address.startswith("127.0.0.1:") and bind == f"127.0.0.1:{address.split(':')[1]}"
