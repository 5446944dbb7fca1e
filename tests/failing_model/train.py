"""A trial that fails the way `data.fail` in its config says (tests/e2e/test_cluster_faults.py,
tests/e2e/test_slurm.py).

value_error: ValueError("bad lr 7") on rank `data.fail_rank` (default 0), after
    det.keras.init(); the other ranks go on to a collective that never completes
import_error: an ImportError before det_sdk or TensorFlow is imported
segfault: killed by SIGSEGV before anything is imported
"""

import json
import os
import signal

mode = json.loads(os.environ["DET_EXPERIMENT_CONFIG"])["data"]["fail"]
if mode == "segfault":
    os.kill(os.getpid(), signal.SIGSEGV)
if mode == "import_error":
    import det_sdk_has_no_such_module  # noqa: F401

import numpy as np  # noqa: E402

import det_sdk as det  # noqa: E402

context = det.keras.init(hparams={"learning_rate": 7})
lr = context.training.hparams["learning_rate"]
if context.distributed.rank == context.config_data.get("fail_rank", 0):
    raise ValueError(f"bad lr {lr}")
# the other ranks wait for the failing one in a collective, as training would
print("rank", context.distributed.rank, "waits", context.distributed.allgather(np.ones(1)))
