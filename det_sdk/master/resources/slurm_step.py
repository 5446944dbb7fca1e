"""What runs inside a det_sdk Slurm job (on the nodes, not in the master).

``python -m det_sdk.master.resources.slurm_step batch SPEC``: the job's batch step,
on the first node of the allocation. It reads the task's spec (its ``DET_*``
environment, entrypoint and exit-status file, written by the master, owner-only),
starts Horovod's Gloo rendezvous server when the job has more than one task, runs
``srun`` to start one rank per task, and records srun's exit status beside the
working directory, as the local manager's shell does.

``python -m det_sdk.master.resources.slurm_step rank ENTRYPOINT``: one rank, started
by ``srun``. It turns Slurm's description of the rank (``SLURM_PROCID``,
``SLURM_LOCALID``, ``SLURMD_NODENAME``) into Horovod's (``HOROVOD_RANK``,
``HOROVOD_LOCAL_RANK``, ``HOROVOD_CROSS_RANK``, sizes, hostname, the network
interface towards the rendezvous) and execs the entrypoint, under
:mod:`det_sdk.launch.catch` when the spec names a failure-record directory. No ssh and no
``horovodrun``: Slurm starts the processes, Horovod only meets them.

Ranks are placed in blocks (``srun --distribution=block``, Slurm's default): the
first node's tasks are ranks 0..k-1, and so on, as Horovod's own host assignment
numbers them; a rank that finds itself elsewhere says so and fails.

Only the standard library and Horovod's rendezvous server are imported here: this
runs once per rank, before the training script's own imports.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

from det_sdk.atomic import write_atomic  # the standard library only
from det_sdk.env import setting
from det_sdk.errors import UsageError

__all__ = ["Slot", "expand_tasks_per_node", "horovod_plan"]

# det_sdk's own variable between the batch step and the ranks: the job's hosts in rank
# order with their task counts, as horovodrun's -H takes them ("node1:2,node2:2")
HOSTS_VAR = "DET_SLURM_HOSTS"
# the exit status a job ended by Slurm itself (time limit, preemption, an operator's
# scancel) records: a failure, so that the trial resumes from its checkpoint later
# instead of counting as finished because the script stopped cleanly on SIGTERM
ENDED_BY_SLURM = 143


class Slot(NamedTuple):
    """One rank's place, with the fields Horovod's rendezvous server reads."""

    hostname: str
    rank: int
    local_rank: int
    cross_rank: int
    size: int
    local_size: int
    cross_size: int


def expand_tasks_per_node(value: str) -> list[int]:
    """Slurm's ``SLURM_TASKS_PER_NODE`` as one count per node.

    >>> expand_tasks_per_node("2(x2),1")
    [2, 2, 1]
    >>> expand_tasks_per_node("4")
    [4]
    """
    counts: list[int] = []
    for part in value.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not m:
            raise UsageError(f"unexpected SLURM_TASKS_PER_NODE: {value!r}")
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return counts


def horovod_plan(hosts: list[tuple[str, int]]) -> list[Slot]:
    """Every rank's slot, host by host in order (Horovod's own block assignment).

    >>> [(s.hostname, s.rank, s.local_rank, s.cross_rank, s.cross_size)
    ...  for s in horovod_plan([("a", 2), ("b", 1)])]
    [('a', 0, 0, 0, 2), ('a', 1, 1, 0, 1), ('b', 2, 0, 1, 2)]
    """
    size = sum(n for _, n in hosts)
    slots: list[Slot] = []
    for host_index, (host, n) in enumerate(hosts):
        for local in range(n):
            # the hosts that have a rank with this local rank, and this one's place among them
            with_local = [i for i, (_, m) in enumerate(hosts) if m > local]
            slots.append(Slot(host, len(slots), local, with_local.index(host_index), size, n,
                              len(with_local)))
    return slots


def _parse_hosts(value: str) -> list[tuple[str, int]]:
    return [(h.rsplit(":", 1)[0], int(h.rsplit(":", 1)[1])) for h in value.split(",")]


def _node_hosts() -> list[str]:
    """The job's nodes in Slurm's order (``scontrol show hostnames``)."""
    out = subprocess.run(["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]],
                         capture_output=True, text=True, check=True).stdout
    return out.split()


def _node_address(node: str) -> str:
    """The IPv4 address the other nodes reach ``node`` at (its Slurm ``NodeAddr``)."""
    override = setting("DET_SLURM_RENDEZVOUS_ADDR")
    if override:
        return override
    addr = node
    try:
        out = subprocess.run(["scontrol", "show", "node", "-o", node], capture_output=True,
                             text=True, timeout=30).stdout
        m = re.search(r"\bNodeAddr=(\S+)", out)
        if m:
            addr = m.group(1)
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        return socket.gethostbyname(addr)
    except OSError:
        return socket.gethostbyname(socket.gethostname())


def _interface_towards(addr: str) -> str | None:
    """The name of this host's network interface that reaches ``addr`` (Gloo binds to it)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((addr, 9))  # no packet is sent: this only picks the route
            local_ip = s.getsockname()[0]
        import psutil  # a dependency of Horovod's launcher

        for name, addrs in psutil.net_if_addrs().items():
            if any(a.family == socket.AF_INET and a.address == local_ip for a in addrs):
                return name
    except (OSError, ImportError):
        pass
    return None


def batch(spec_path: str) -> int:
    """The job's batch step: rendezvous, srun, the exit status."""
    spec = json.loads(Path(spec_path).read_text())
    exit_path = Path(spec["exit_file"])
    ended_by_slurm = []

    def on_signal(signum: int, frame: object) -> None:
        # det_sdk's own stops signal the ranks' step only: a signal here is Slurm's
        ended_by_slurm.append(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    env = {**os.environ, **spec["env"]}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    ntasks = int(os.environ.get("SLURM_NTASKS", "1"))
    nodes = _node_hosts()
    counts = expand_tasks_per_node(os.environ.get("SLURM_TASKS_PER_NODE", str(ntasks)))
    hosts = list(zip(nodes, counts))
    where = ", ".join(f"{h} x{n}" for h, n in hosts)
    print(f"det_sdk: Slurm job {os.environ.get('SLURM_JOB_ID')}: {ntasks} ranks on {where}",
          flush=True)
    if ntasks > 1:
        from horovod.runner.http.http_server import RendezvousServer

        server = RendezvousServer()
        port = server.start()
        server.init(horovod_plan(hosts))
        env.update({
            "HOROVOD_GLOO_RENDEZVOUS_ADDR": _node_address(os.environ.get("SLURMD_NODENAME",
                                                                         nodes[0])),
            "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
            "HOROVOD_CONTROLLER": "gloo",
            "HOROVOD_CPU_OPERATIONS": "gloo",
            HOSTS_VAR: ",".join(f"{h}:{n}" for h, n in hosts),
        })
    command = ["srun", "--label", "--kill-on-bad-exit=1", "--distribution=block",
               sys.executable, "-m", "det_sdk.master.resources.slurm_step", "rank",
               spec["entrypoint"], *([spec["record_dir"]] if spec.get("record_dir") else [])]
    code = 1
    if not ended_by_slurm:
        try:
            code = subprocess.Popen(command, env=env).wait()
        except OSError as err:
            print(f"det_sdk: cannot start srun: {err}", file=sys.stderr, flush=True)
    if ended_by_slurm and code == 0:
        code = ENDED_BY_SLURM
    if code < 0:  # killed by a signal: as a shell reports it
        code = 128 - code
    write_atomic(exit_path, f"{code}\n")  # the master reads it whole, or not yet
    return code


def rank(entrypoint: str, records: str | None = None) -> int:
    """One rank: Horovod's variables from Slurm's, then the entrypoint (under
    :mod:`det_sdk.launch.catch`, writing its failure to ``records``, when given)."""
    env = os.environ
    size = int(env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS") or "1")
    if size > 1:
        proc = int(env["SLURM_PROCID"])
        node = env.get("SLURMD_NODENAME", socket.gethostname())
        slot = horovod_plan(_parse_hosts(env[HOSTS_VAR]))[proc]
        if slot.hostname != node or slot.local_rank != int(env.get("SLURM_LOCALID", "0")):
            print(f"det_sdk: rank {proc} runs on {node} (local {env.get('SLURM_LOCALID')}), "
                  f"not on {slot.hostname} (local {slot.local_rank}) as Horovod's plan has "
                  "it: ranks must be placed in blocks (no --distribution option)",
                  file=sys.stderr, flush=True)
            return 2
        env.update({
            "HOROVOD_HOSTNAME": slot.hostname,
            "HOROVOD_RANK": str(slot.rank),
            "HOROVOD_SIZE": str(slot.size),
            "HOROVOD_LOCAL_RANK": str(slot.local_rank),
            "HOROVOD_LOCAL_SIZE": str(slot.local_size),
            "HOROVOD_CROSS_RANK": str(slot.cross_rank),
            "HOROVOD_CROSS_SIZE": str(slot.cross_size),
        })
        iface = _interface_towards(env["HOROVOD_GLOO_RENDEZVOUS_ADDR"])
        if iface and "HOROVOD_GLOO_IFACE" not in env:
            env["HOROVOD_GLOO_IFACE"] = iface
        print(f"det_sdk: rank {slot.rank} of {slot.size} on {node} "
              f"(local rank {slot.local_rank} of {slot.local_size})", flush=True)
    if records:
        os.execv(sys.executable, [sys.executable, "-m", "det_sdk.launch.catch", "--record-dir",
                                  records, "--", "sh", "-c", entrypoint])
    os.execvp("sh", ["sh", "-c", entrypoint])
    return 127  # not reached


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "batch":
        return batch(argv[1])
    if len(argv) in (2, 3) and argv[0] == "rank":
        return rank(*argv[1:])
    print("usage: python -m det_sdk.master.resources.slurm_step batch SPEC | rank ENTRYPOINT "
          f"[RECORD_DIR] (got {shlex.join(argv)})", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
