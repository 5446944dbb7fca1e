"""A rank that meets its peers every 0.1 s until stopped (tests/e2e/test_launcher_gone.py).

Run under ``torchrun --nproc_per_node 2``; each rank writes its pid to ``$ORPHAN_DIR/pid.<rank>``
once the ranks have met, then meets the others in a collective every 0.1 s, for ever: only
det_sdk's launcher watch (det_sdk.engine.orphan) ends it once torchrun is gone.
"""

import os
import time
from pathlib import Path

import det_sdk.pytorch as pytorch

with pytorch.init() as context:
    dist = context.distributed
    dist.allgather(dist.rank)
    Path(os.environ["ORPHAN_DIR"], f"pid.{dist.rank}").write_text(str(os.getpid()))
    while True:
        dist.allgather(dist.rank)
        time.sleep(0.1)
