"""JAX's processes joined by det_sdk (tests/e2e/test_collectives_jax.py).

Run under ``torchrun --nproc_per_node 2`` or ``horovodrun -np 2 --gloo``: each rank builds
``JaxDistributed.from_env()``, meets the others in det.core's object collectives and in one
``jax.jit`` over an array sharded across the processes, and prints one JSON line
``JAX_RANKS {...}`` of what it saw. ``JAX_RANKS_EXIT_RANK=<r>``: rank r exits at once,
before building anything (a rank that never arrives).
"""

import json
import os
import sys

import det_sdk.ranks

rank = det_sdk.ranks.which(among=("torchrun", "horovodrun")).rank
if os.environ.get("JAX_RANKS_EXIT_RANK") == str(rank):
    print(f"rank {rank}: leaving before JaxDistributed", flush=True)
    sys.exit(0)

from det_sdk.collectives.jax import JaxDistributed  # noqa: E402

dist = JaxDistributed.from_env()
try:
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    gathered = dist.allgather({"rank": dist.rank, "pid": os.getpid()})
    token = dist.broadcast(f"from rank {dist.rank}")  # rank 0's on every rank
    token_1 = dist.broadcast(f"from rank {dist.rank}", root=1)
    # one jax.jit over the processes: each gives 3 values, rank r's are r + 1
    mesh = Mesh(np.array(jax.devices()), ("procs",))
    local = np.full((3 * jax.local_device_count(),), dist.rank + 1, dtype=np.float32)
    global_array = jax.make_array_from_process_local_data(
        NamedSharding(mesh, PartitionSpec("procs")), local)
    total = float(jax.jit(lambda a: a.sum())(global_array))
    dist.barrier()
    print("JAX_RANKS " + json.dumps({
        "rank": dist.rank, "size": dist.size, "local_rank": dist.local_rank,
        "process_index": jax.process_index(), "process_count": jax.process_count(),
        "devices": len(jax.devices()), "local_devices": jax.local_device_count(),
        "global_shape": list(global_array.shape), "total": total,
        "gathered_ranks": [g["rank"] for g in gathered],
        "distinct_pids": len({g["pid"] for g in gathered}),
        "broadcast": token, "broadcast_1": token_1, "any": dist.any(dist.rank == 1),
        "coordinator": dist.coordinator, "repr": repr(dist),
        "torch_loaded": "torch" in sys.modules,
        "tensorflow_loaded": "tensorflow" in sys.modules,
        "cpu_collectives": jax.config.jax_cpu_collectives_implementation,
    }), flush=True)
finally:
    dist.close()
print(f"rank {dist.rank}: closed, jax.distributed initialized: "
      f"{jax.distributed.is_initialized()}", flush=True)
