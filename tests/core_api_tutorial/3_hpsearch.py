"""Core API tutorial, step 3 (its shape, written here, Determined <= 0.37): a
hyperparameter search. The searcher's operations say how far to train (``op.length``
steps, ``searcher.max_length`` unitless); the chief reports the searcher metric after each.
"""

import json
import logging
import pathlib
import time

import det_sdk as det

REPORT_EVERY = 5


def save_state(x: int, steps_completed: int, path: pathlib.Path) -> None:
    (path / "state.json").write_text(json.dumps({"x": x, "steps_completed": steps_completed}))


def load_state(path: pathlib.Path) -> tuple[int, int]:
    state = json.loads((path / "state.json").read_text())
    return state["x"], state["steps_completed"]


def main(core_context, latest_checkpoint, increment_by: int) -> None:
    x, steps_completed = 0, 0
    if latest_checkpoint is not None:
        with core_context.checkpoint.restore_path(latest_checkpoint) as path:
            x, steps_completed = load_state(path)
    for op in core_context.searcher.operations():
        while steps_completed < op.length:
            x += increment_by
            steps_completed += 1
            time.sleep(0.05)
            if steps_completed % REPORT_EVERY == 0:
                core_context.train.report_training_metrics(steps_completed=steps_completed,
                                                           metrics={"x": x})
                op.report_progress(steps_completed)
                with core_context.checkpoint.store_path(
                        {"steps_completed": steps_completed}) as (path, storage_id):
                    save_state(x, steps_completed, path)
                logging.info("checkpoint %s at step %d", storage_id, steps_completed)
                if core_context.preempt.should_preempt():
                    return
        core_context.train.report_validation_metrics(steps_completed=steps_completed,
                                                     metrics={"x": x})
        if core_context.distributed.rank == 0:
            op.report_completed(x)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    info = det.get_cluster_info()
    assert info is not None, "this tutorial runs on the cluster"
    with det.core.init() as core_context:
        main(core_context, info.latest_checkpoint, info.trial.hparams["increment_by"])
