"""The Core API tutorial's distributed step, its shape written here from Determined's
docs: every worker adds its increment each batch (allgather), the chief reports and
checkpoints, every worker asks about preemption, the searcher's operations drive it.
"""

import json
import logging
import os
import pathlib
import sys
import time

import det_sdk as det


def save_state(x: int, steps_completed: int, trial_id: int, path: pathlib.Path) -> None:
    (path / "state").write_text(json.dumps({"x": x, "steps": steps_completed,
                                            "trial_id": trial_id}))


def load_state(trial_id: int, path: pathlib.Path) -> tuple[int, int]:
    state = json.loads((path / "state").read_text())
    return state["x"], state["steps"]


def main(core_context, latest_checkpoint, trial_id, increment_by) -> None:
    x, batch = 0, 0
    if latest_checkpoint is not None:
        with core_context.checkpoint.restore_path(latest_checkpoint) as path:
            x, batch = load_state(trial_id, path)
    for op in core_context.searcher.operations():
        while batch < op.length:
            x += sum(core_context.distributed.allgather(increment_by))
            batch += 1
            time.sleep(float(os.environ.get("STEP_SLEEP", "0")))
            if batch % 10 == 0:
                if core_context.distributed.rank == 0:
                    core_context.train.report_training_metrics(
                        steps_completed=batch, metrics={"x": x})
                    op.report_progress(batch)
                    with core_context.checkpoint.store_path({"steps_completed": batch}) as (
                            path, _uuid):
                        save_state(x, batch, trial_id, path)
                if core_context.preempt.should_preempt():
                    return
        if core_context.distributed.rank == 0:
            core_context.train.report_validation_metrics(steps_completed=batch,
                                                         metrics={"x": x})
            op.report_completed(x)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    info = det.get_cluster_info()
    assert info is not None
    distributed = det.core.DistributedContext(
        rank=int(os.environ["RANK"]), size=int(os.environ["SIZE"]),
        local_rank=int(os.environ["LOCAL_RANK"]), local_size=int(os.environ["LOCAL_SIZE"]),
        cross_rank=int(os.environ["CROSS_RANK"]), cross_size=int(os.environ["CROSS_SIZE"]),
        chief_ip=os.environ["CHIEF_IP"])
    with det.core.init(distributed=distributed) as core_context:
        main(core_context, info.latest_checkpoint, info.trial.trial_id,
             info.trial.hparams["increment_by"])
    print("heavy modules:", sorted(m for m in ("torch", "tensorflow", "horovod")
                                   if m in sys.modules))
