"""Core API tutorial, step 3 (its shape, written here, Determined 0.38): the script
trains to a fixed length and reports the searcher's time metric (``batches``) with each
validation; it never asks for searcher operations. A trial the searcher stops is told
through ``preempt.should_preempt()``.
"""

import json
import logging
import pathlib
import time

import det_sdk as det

MAX_BATCHES = 20  # the config's searcher.max_time
REPORT_EVERY = 5


def save_state(x: int, steps_completed: int, path: pathlib.Path) -> None:
    (path / "state.json").write_text(json.dumps({"x": x, "steps_completed": steps_completed}))


def load_state(path: pathlib.Path) -> tuple[int, int]:
    state = json.loads((path / "state.json").read_text())
    return state["x"], state["steps_completed"]


def main(core_context, latest_checkpoint, increment_by: int) -> None:
    x, start = 0, 0
    if latest_checkpoint is not None:
        with core_context.checkpoint.restore_path(latest_checkpoint) as path:
            x, start = load_state(path)
    for batch in range(start, MAX_BATCHES):
        x += increment_by
        steps_completed = batch + 1
        time.sleep(0.1)
        if steps_completed % REPORT_EVERY == 0:
            core_context.train.report_training_metrics(steps_completed=steps_completed,
                                                       metrics={"x": x})
            core_context.train.report_validation_metrics(
                steps_completed=steps_completed, metrics={"x": x, "batches": steps_completed})
            with core_context.checkpoint.store_path({"steps_completed": steps_completed}) as (
                    path, storage_id):
                save_state(x, steps_completed, path)
            logging.info("checkpoint %s at batch %d", storage_id, steps_completed)
            if core_context.preempt.should_preempt():
                logging.info("stopped after %d batches", steps_completed)
                return


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    info = det.get_cluster_info()
    assert info is not None, "this tutorial runs on the cluster"
    with det.core.init() as core_context:
        main(core_context, info.latest_checkpoint, info.trial.hparams["increment_by"])
