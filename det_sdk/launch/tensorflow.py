"""The TensorFlow launcher: give each training process its ``TF_CONFIG``, or do nothing.

::

    entrypoint_script: python3 -m det_sdk.launch.tensorflow -- python3 train.py

How it learns the processes:

- Under ``horovodrun`` (the master runs a trial of ``slots_per_trial: N > 1`` as
  ``horovodrun -np N --gloo <entrypoint>``; also any ``horovodrun`` of your own):
  each launcher sees ``HOROVOD_RANK``/``HOROVOD_SIZE``, picks a free port on its
  host (``det_sdk.launch.ports``), publishes ``host:port`` in Horovod's rendezvous
  store (the HTTP key-value server ``horovodrun`` runs for Gloo), reads the others'
  and execs the script with ``TF_CONFIG`` (worker ``index`` = its rank). No
  TensorFlow is imported here.
- ``--processes N`` off ``horovodrun``: it starts N copies of the script on this
  host itself (Determined's launcher spawns its workers too), each with its
  ``TF_CONFIG``, forwards SIGTERM/SIGINT to them, and exits with the first failure.
- One process: it execs the script unchanged (no ``TF_CONFIG``).

Next to ``TF_CONFIG`` each worker gets ``DET_TF_COLLECTIVE_ADDR`` and
``DET_TF_COLLECTIVE_TOKEN``: where ``DistributedContext.from_tf_config()``'s object
collectives meet (the chief) and the token that admits a worker. The launcher listens on
that address itself before publishing it and the chief's script inherits the socket
(``DET_TF_COLLECTIVE_FD``), so no other process can take the port in between.

Which Keras runs is not asked here (that would import TensorFlow): the script's
``DistributedContext.from_tf_config()`` decides. On Keras 2 the workers train under
``MultiWorkerMirroredStrategy``. On Keras 3, which cannot (keras-team/keras#20585),
workers under ``horovodrun`` become Horovod's processes (``TF_CONFIG`` is dropped
from their environment) and ``DeterminedCallback`` trains them with det_sdk's
gradient averaging, broadcast and batch splitting; ``--processes N`` workers are
refused with an error saying to run under ``horovodrun`` instead.

>>> parse_args(["--", "python3", "train.py", "--lr", "0.1"])
(1, ['python3', 'train.py', '--lr', '0.1'])
>>> tf_config(["h:1", "h:2"], 1)
'{"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 1}}'
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

from det_sdk.errors import DetSdkError, StateError
from det_sdk.launch._node import node_slots, under_horovodrun
from det_sdk.launch.ports import unused_port
from det_sdk.ranks import horovodrun
from det_sdk.ranks.tf_config import COLLECTIVE_ADDR_VAR, COLLECTIVE_FD_VAR, COLLECTIVE_TOKEN_VAR

__all__ = ["main", "parse_args", "tf_config"]

log = logging.getLogger("det_sdk.launch")

_SCOPE = "det_sdk_tf_launch"
_RENDEZVOUS_TIMEOUT = 120.0


class RendezvousTimeout(DetSdkError, TimeoutError):
    """A worker did not publish its address in Horovod's rendezvous store in time."""


def parse_args(argv: Sequence[str]) -> tuple[int, list[str]]:
    """``[--processes N] [--] SCRIPT...`` -> (processes, script)."""
    argv = list(argv)
    script: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, script = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(
        prog="python3 -m det_sdk.launch.tensorflow",
        usage="%(prog)s [--processes N] -- SCRIPT...",
        description="Give each TensorFlow training process its TF_CONFIG (several processes "
                    "under horovodrun, or --processes N), or exec the script unchanged.")
    parser.add_argument("--processes", type=int, default=1,
                        help="start N worker processes on this host (off horovodrun)")
    parser.add_argument("script", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    script = list(args.script) + script
    if not script:
        parser.error("no script to launch: give it after --, e.g. -- python3 train.py")
    if args.processes < 1:
        parser.error(f"--processes must be >= 1, got {args.processes}")
    return args.processes, script


def tf_config(workers: Sequence[str], index: int) -> str:
    """The ``TF_CONFIG`` of worker ``index`` among ``workers`` (``host:port``)."""
    return json.dumps({"cluster": {"worker": list(workers)},
                       "task": {"type": "worker", "index": index}})


def _chief_listener() -> socket.socket:
    """The chief's collectives socket, listening on every interface before its port is
    published; the chief's script gets it through exec (``DET_TF_COLLECTIVE_FD``)."""
    server = socket.create_server(("", 0))
    server.set_inheritable(True)
    return server


def _worker_env(base: Mapping[str, str], workers: Sequence[str], index: int,
                collective: str, token: str,
                listener: socket.socket | None = None) -> dict[str, str]:
    env = {**base, "TF_CONFIG": tf_config(workers, index), COLLECTIVE_ADDR_VAR: collective,
           COLLECTIVE_TOKEN_VAR: token}
    env.pop(COLLECTIVE_FD_VAR, None)
    if listener is not None:
        env[COLLECTIVE_FD_VAR] = str(listener.fileno())
    return env


# --- under horovodrun: agree on addresses through Horovod's rendezvous store -------------


def _kv_url(env: Mapping[str, str], key: str) -> str:
    store = horovodrun.gloo_rendezvous(env)
    if store is None:
        raise StateError("det_sdk.launch.tensorflow: under horovodrun but without "
                         "HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT; run horovodrun with --gloo")
    addr, port = store
    return f"http://{addr}:{port}/{_SCOPE}/{key}"


def _put(env: Mapping[str, str], key: str, value: Any) -> None:
    req = urllib.request.Request(_kv_url(env, key), data=json.dumps(value).encode(),
                                 method="PUT")
    with urllib.request.urlopen(req, timeout=10):
        pass


def _get(env: Mapping[str, str], key: str, deadline: float) -> Any:
    while True:
        try:
            with urllib.request.urlopen(_kv_url(env, key), timeout=10) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as err:
            if err.code != 404:
                raise
        if time.monotonic() > deadline:
            raise RendezvousTimeout(f"det_sdk.launch.tensorflow: worker {key} did not publish its "
                                    f"address within {_RENDEZVOUS_TIMEOUT:.0f} s")
        time.sleep(0.1)


def _horovod_env(env: Mapping[str, str]) -> tuple[dict[str, str], socket.socket | None]:
    """Worker ``rank``'s environment, and on rank 0 the chief's listening socket, which
    the caller must hold open until it execs the script: its descriptor is the one
    ``DET_TF_COLLECTIVE_FD`` names (a socket left to the garbage collector closes, and the
    published port would be free for any process to take before the script binds it)."""
    ranks = horovodrun.read(env)
    assert ranks is not None  # main() calls this under horovodrun only
    rank, size = ranks.rank, ranks.size
    host = horovodrun.hostname(env) or socket.gethostname()
    # TensorFlow's gRPC server binds this port after its import: a port outside the
    # ephemeral range, which no connection on the host can take meanwhile
    mine: dict[str, Any] = {"addr": f"{host}:{unused_port('')}"}
    listener = None
    if rank == 0:
        listener = _chief_listener()
        mine["collective"] = f"{host}:{listener.getsockname()[1]}"
        mine["token"] = secrets.token_hex(16)
    _put(env, str(rank), mine)
    deadline = time.monotonic() + _RENDEZVOUS_TIMEOUT
    every = [mine if r == rank else _get(env, str(r), deadline) for r in range(size)]
    chief = every[0]
    return _worker_env(env, [w["addr"] for w in every], rank, chief["collective"],
                       chief["token"], listener), listener


# --- --processes N: spawn the workers here -------------------------------------------------


def _spawn(n: int, script: list[str]) -> int:
    host = "127.0.0.1"
    workers = [f"{host}:{unused_port(host)}" for _ in range(n)]
    token = secrets.token_hex(16)
    with _chief_listener() as listener:  # worker 0's; this process's copy closes
        collective = f"{host}:{listener.getsockname()[1]}"
        procs = [subprocess.Popen(
            script, env=_worker_env(os.environ, workers, i, collective, token,
                                    listener if i == 0 else None),
            pass_fds=(listener.fileno(),) if i == 0 else ()) for i in range(n)]

    def forward(signum: int, frame: Any) -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, forward)
    # The first failure ends the others: a worker left alone waits in a collective forever.
    while True:
        codes = [p.poll() for p in procs]
        failed = [c for c in codes if c not in (None, 0)]
        if failed:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
            for p in procs:
                p.wait()
            return failed[0]
        if all(c == 0 for c in codes):
            return 0
        time.sleep(0.1)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the launcher (``python3 -m det_sdk.launch.tensorflow -- SCRIPT...``)."""
    processes, script = parse_args(sys.argv[1:] if argv is None else argv)
    slots = 1 if horovodrun.launched() or processes > 1 else node_slots()
    if slots > 1:
        # run once for the node (Determined's `entrypoint:`): its slots' workers under
        # horovodrun, each of them this launcher again
        command = under_horovodrun(
            [sys.executable, "-m", "det_sdk.launch.tensorflow", "--", *script], slots)
        os.execvp(command[0], command)
    under = horovodrun.read()
    if under is not None and under.size > 1:
        if processes != 1:
            print("det_sdk.launch.tensorflow: --processes is for runs off horovodrun; under "
                  "horovodrun each of its processes is one worker", file=sys.stderr)
            return 2
        # held until exec: the script inherits its descriptor
        env, _held = _horovod_env(os.environ)
    elif processes > 1:
        return _spawn(processes, script)
    else:
        env = dict(os.environ)
    try:
        os.execvpe(script[0], script, env)
    except OSError as err:
        print(f"det_sdk.launch.tensorflow: cannot run {script[0]!r}: {err}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
