"""A trial whose newest checkpoint fails verification on restore (tests/e2e/test_nothing_lost).

First run: two checkpoints, the second marked bad, then a crash. A restart from the
bad one raises CheckpointCorruptError naming its directory, as det_sdk.keras does; the
master must then hand the trial the older, intact one.
"""

import json
import sys

import det_sdk as det
from det_sdk.errors import CheckpointCorruptError

info = det.get_cluster_info()
with det.core.init() as core:
    if info.latest_checkpoint is None:
        for step in (1, 2):
            with core.checkpoint.store_path({"steps_completed": step}) as (path, _):
                (path / "state.json").write_text(json.dumps({"step": step, "ok": step == 1}))
        sys.exit(3)
    with core.checkpoint.restore_path(info.latest_checkpoint) as path:
        state = json.loads((path / "state.json").read_text())
    if not state["ok"]:
        raise CheckpointCorruptError(f"checkpoint {path}: state.bin does not match its "
                                     "checksum (altered or damaged on disk)")
    print(f"resumed from step {state['step']}")
