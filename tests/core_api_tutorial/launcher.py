"""A per-node launcher in the shape of Determined's Core API distributed tutorial
(written here from its description): one worker per slot of this node, each under
`determined.launch.wrap_rank`, ranks from ClusterInfo; the first failure stops the rest.
"""

import logging
import os
import subprocess
import sys
import time

import det_sdk as det


def main() -> int:
    info = det.get_cluster_info()
    assert info is not None, "this launcher runs on the cluster"
    slots, nodes = len(info.slot_ids), len(info.container_addrs)
    cross_rank, chief_ip = info.container_rank, info.container_addrs[0]
    procs = []
    for local_rank in range(slots):
        rank = cross_rank * slots + local_rank
        env = {**os.environ, "RANK": str(rank), "SIZE": str(slots * nodes),
               "LOCAL_RANK": str(local_rank), "LOCAL_SIZE": str(slots),
               "CROSS_RANK": str(cross_rank), "CROSS_SIZE": str(nodes), "CHIEF_IP": chief_ip}
        cmd = ["python3", "-m", "determined.launch.wrap_rank", str(rank), "--", *sys.argv[1:]]
        procs.append(subprocess.Popen(cmd, env=env))
    failed = 0
    while procs:
        for p in list(procs):
            code = p.poll()
            if code is None:
                continue
            procs.remove(p)
            if code and not failed:
                failed = code
                for other in procs:
                    other.kill()
        time.sleep(0.05)
    return failed


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    sys.exit(main())
