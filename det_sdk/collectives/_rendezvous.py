"""What the process groups share: how ranks find rank 0 before any group exists.

- :class:`DistributedSetupError`, what every module here raises when the ranks cannot
  find each other;
- :func:`own_address`, the address of this host that another host reaches;
- :class:`HorovodKV`, ``horovodrun --gloo``'s rendezvous key-value store (plain HTTP at
  ``HOROVOD_GLOO_RENDEZVOUS_ADDR:PORT``), where rank 0 publishes what the others read;
- :func:`gpu_refusal`, the error of a machine with fewer GPUs than processes.

No framework is imported here.

>>> own_address("10.0.0.1", local_only=True)
'127.0.0.1'
>>> HorovodKV("h", "1", scope="det_sdk_x", timeout=1).url("k")
'http://h:1/det_sdk_x/k'
"""

from __future__ import annotations

import os
import socket
import time
import urllib.error
import urllib.request
from typing import Protocol

from det_sdk.errors import DetSdkError

__all__ = ["NO_RANKS", "DistributedSetupError", "HorovodKV", "KeyValueStore", "gpu_refusal",
           "own_address"]


#: what a process group says when no launcher described the ranks
NO_RANKS = ("det_sdk: no ranks in the environment (torchrun's RANK/WORLD_SIZE or "
            "horovodrun's HOROVOD_RANK/HOROVOD_SIZE)")

class DistributedSetupError(DetSdkError, RuntimeError):
    """The ranks could not find each other (rendezvous, missing variables), or a machine
    has fewer GPUs than processes."""


class KeyValueStore(Protocol):
    """Where rank 0 publishes what the other ranks read (addresses, ports, a token)."""

    def set(self, key: str, value: str) -> None:
        """Publish ``value`` under ``key``."""

    def get(self, key: str) -> str:
        """The value under ``key``, waiting for it up to the store's bound (then
        :class:`DistributedSetupError`)."""


def own_address(toward: str, local_only: bool) -> str:
    """This host's address on the interface that routes ``toward`` (loopback when every
    rank is on this host). Nothing is sent: a UDP socket's ``connect`` only picks the route.

    >>> own_address("127.0.0.1", local_only=False).startswith("127.")
    True
    """
    if local_only:
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # the interface routing there
        s.connect((toward, 9))
        return str(s.getsockname()[0])


class HorovodKV:
    """``horovodrun --gloo``'s rendezvous store: ``PUT``/``GET`` of
    ``http://addr:port/<scope>/<key>``; a key not yet set answers 404, which
    :meth:`get` polls until ``timeout`` seconds have passed.

    >>> HorovodKV("127.0.0.1", "8", scope="det_sdk_jax", timeout=5).url("objects")
    'http://127.0.0.1:8/det_sdk_jax/objects'
    """

    def __init__(self, addr: str, port: str | int, *, scope: str, timeout: float) -> None:
        self.addr, self.port, self.scope, self.timeout = addr, str(port), scope, timeout

    def url(self, key: str) -> str:
        """Where ``key`` lives."""
        return f"http://{self.addr}:{self.port}/{self.scope}/{key}"

    def set(self, key: str, value: str) -> None:
        req = urllib.request.Request(self.url(key), data=value.encode(), method="PUT")
        try:
            urllib.request.urlopen(req, timeout=self.timeout).close()
        except urllib.error.URLError as err:
            raise DistributedSetupError(
                f"det_sdk: rank 0 cannot publish its address at {req.full_url}: "
                f"{getattr(err, 'reason', err)} (did horovodrun exit?)") from err

    def get(self, key: str) -> str:
        url = self.url(key)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                with urllib.request.urlopen(url, timeout=self.timeout) as resp:
                    return bytes(resp.read()).decode()
            except urllib.error.HTTPError as err:
                if err.code != 404 or time.monotonic() > deadline:
                    raise DistributedSetupError(
                        f"det_sdk: rank 0's address never appeared at {url}: {err}"
                    ) from err
            except urllib.error.URLError as err:  # horovodrun's server is gone or unreachable
                raise DistributedSetupError(
                    f"det_sdk: horovodrun's rendezvous store at {url} cannot be reached: "
                    f"{err.reason} (did horovodrun exit?)") from err
            time.sleep(0.05)


def gpu_refusal(local_rank: int, local_size: int, gpus: int) -> DistributedSetupError:
    """The error of local rank ``local_rank`` among ``local_size`` processes on a machine
    showing ``gpus`` GPUs, too few for one each (two processes on one GPU fail in NCCL).

    >>> print(gpu_refusal(1, 2, 1))  # doctest: +ELLIPSIS
    det_sdk: 2 processes on this machine, but it shows 1 GPU...local rank 1 has none...
    """
    shown = os.environ.get("CUDA_VISIBLE_DEVICES")
    return DistributedSetupError(
        f"det_sdk: {local_size} processes on this machine, but it shows {gpus} "
        f"GPU{'s' if gpus != 1 else ''}"
        f"{f' (CUDA_VISIBLE_DEVICES={shown!r})' if shown is not None else ''}: each "
        f"process trains on a GPU of its own, and local rank {local_rank} has none. "
        f"Start at most {gpus} per machine (--nproc-per-node, slots_per_trial), or "
        "hide the GPUs (CUDA_VISIBLE_DEVICES='') to train on the CPU.")
