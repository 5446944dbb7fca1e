"""Core API tutorial, step 2 (its shape, written here): checkpoints and preemption.

A checkpoint every CHECKPOINT_EVERY steps holds x and the steps done; a trial that
starts again (after a pause) resumes from the latest one. Asked to stop, the script
checkpoints where it is and exits 0.
"""

import json
import logging
import pathlib
import time

import det_sdk as det

STEPS = 30
CHECKPOINT_EVERY = 10


def save_state(x: int, steps_completed: int, trial_id: int, path: pathlib.Path) -> None:
    (path / "state.json").write_text(json.dumps(
        {"x": x, "steps_completed": steps_completed, "trial_id": trial_id}))


def load_state(path: pathlib.Path) -> tuple[int, int]:
    state = json.loads((path / "state.json").read_text())
    return state["x"], state["steps_completed"]


def main(core_context, latest_checkpoint, trial_id: int, increment_by: int) -> None:
    x, start = 0, 0
    if latest_checkpoint is not None:
        with core_context.checkpoint.restore_path(latest_checkpoint) as path:
            x, start = load_state(path)
        logging.info("resuming from step %d with x=%d", start, x)
    for step in range(start, STEPS):
        x += increment_by
        steps_completed = step + 1
        time.sleep(0.1)
        core_context.train.report_training_metrics(steps_completed=steps_completed,
                                                   metrics={"x": x})
        preempted = core_context.preempt.should_preempt()
        if steps_completed % CHECKPOINT_EVERY == 0 or preempted:
            with core_context.checkpoint.store_path({"steps_completed": steps_completed}) as (
                    path, storage_id):
                save_state(x, steps_completed, trial_id, path)
            logging.info("checkpoint %s at step %d", storage_id, steps_completed)
        if preempted:
            logging.info("preempted after step %d", steps_completed)
            return
    core_context.train.report_validation_metrics(steps_completed=STEPS, metrics={"x": x})


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    info = det.get_cluster_info()
    assert info is not None, "this tutorial runs on the cluster"
    with det.core.init() as core_context:
        main(core_context, info.latest_checkpoint, info.trial.trial_id, increment_by=1)
