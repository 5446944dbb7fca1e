"""Ports a launcher names before their listener binds (det_sdk.launch.ports), and the
chief's collectives socket that the TensorFlow launcher hands down through exec
(det_sdk.core._distributed.inherited_listener). Sockets of this process only."""

from __future__ import annotations

import os
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from det_sdk.core._distributed import inherited_listener
from det_sdk.launch import ports
from det_sdk.launch.ports import HELD_S, NoFreePortError, ephemeral_range, unused_port
from det_sdk.ranks.tf_config import COLLECTIVE_ADDR_VAR, COLLECTIVE_FD_VAR

pytestmark = pytest.mark.stack_neutral


@pytest.fixture
def spare() -> tuple[list[int], int]:
    """Ports this test may bind or draw: four, and a group of a port and port + 3, named
    in the host's record first so that no test running beside takes them meanwhile."""
    return [unused_port() for _ in range(4)], unused_port(offsets=[3])


@pytest.fixture
def registry(spare: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own record of named ports (not the host's, which other tests share)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path / f"det_sdk-named-ports-{os.getuid()}"


def _draws(monkeypatch: pytest.MonkeyPatch, *first: int) -> None:
    """random.randrange gives ``first`` in order, then what it would have."""
    real, queue = ports.random.randrange, list(first)
    monkeypatch.setattr(ports.random, "randrange",
                        lambda a, b: queue.pop(0) if queue else real(a, b))


def test_named_ports_are_outside_the_ephemeral_range_and_never_named_twice(
        registry: Path) -> None:
    first = ephemeral_range()[0]
    named = [unused_port() for _ in range(40)]
    assert len(set(named)) == 40
    assert all(10000 <= p < first for p in named), named
    for port in named:  # each binds
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
    assert {int(line.split()[0]) for line in registry.read_text().split("\n") if line} \
        == set(named)


def test_a_bound_port_or_one_named_lately_is_skipped_and_offsets_reserve_their_ports(
        spare: tuple[list[int], int], registry: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (taken, lately, expired, last), group = spare
    with socket.create_server(("127.0.0.1", taken)):
        # the record does not hold `taken`: only its bind can refuse it
        registry.write_text(f"{lately} {time.time()}\n{expired} {time.time() - HELD_S - 1}\n")
        _draws(monkeypatch, taken, lately, expired)
        assert unused_port() == expired  # its entry is older than HELD_S
        # a group is refused when any of its ports is taken; all of it is reserved
        _draws(monkeypatch, taken - 3, group)
        assert unused_port(offsets=[3]) == group
        _draws(monkeypatch, group + 3, last)
        assert unused_port() == last  # the group's offset port is reserved
    with pytest.raises(ValueError, match="offsets must be >= 0"):
        unused_port(offsets=[-1])


def test_without_a_writable_record_ports_are_still_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    assert 10000 <= unused_port() < ephemeral_range()[0]


def test_when_nothing_binds_the_error_names_the_host(
        registry: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "_binds", lambda host, port: False)
    with pytest.raises(NoFreePortError, match=r"no free port on 127\.0\.0\.1"):
        unused_port()


@pytest.fixture
def chief_socket() -> Iterator[socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server


def _env(server: socket.socket, fd: int | str) -> dict[str, str]:
    return {COLLECTIVE_ADDR_VAR: f"127.0.0.1:{server.getsockname()[1]}",
            COLLECTIVE_FD_VAR: str(fd)}


WORKERS = ["127.0.0.1:1", "127.0.0.1:2"]


def test_the_chief_adopts_the_launchers_socket_only_when_it_listens_on_its_port(
        chief_socket: socket.socket, tmp_path: Path) -> None:
    adopted = inherited_listener(WORKERS, 0, _env(chief_socket, chief_socket.fileno()))
    assert adopted is not None and adopted.fileno() == chief_socket.fileno()
    assert not adopted.get_inheritable()
    adopted.detach()  # the fixture closes it
    # another port's socket, a file, garbage: not adopted, and the descriptor stays open
    with socket.create_server(("127.0.0.1", 0)) as other:
        env = {**_env(chief_socket, other.fileno())}
        assert inherited_listener(WORKERS, 0, env) is None
        assert other.getsockname()[1] > 0
    with open(tmp_path / "f", "w") as f:
        assert inherited_listener(WORKERS, 0, _env(chief_socket, f.fileno())) is None
        f.write("still open")
    assert inherited_listener(WORKERS, 0, _env(chief_socket, "x")) is None
    assert inherited_listener(WORKERS[:1], 0, _env(chief_socket, chief_socket.fileno())) is None


def test_the_variable_is_taken_once_from_the_process_environment(
        chief_socket: socket.socket, monkeypatch: pytest.MonkeyPatch) -> None:
    for var, value in _env(chief_socket, chief_socket.fileno()).items():
        monkeypatch.setenv(var, value)
    adopted = inherited_listener(WORKERS, 0)
    assert adopted is not None and COLLECTIVE_FD_VAR not in os.environ
    adopted.detach()
    assert inherited_listener(WORKERS, 0) is None
