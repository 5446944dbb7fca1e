"""Core API tutorial, step 1 (its shape, written here): report metrics to the master.

Training metrics every step, validation metrics every VALIDATE_EVERY steps.
"""

import logging
import time

import det_sdk as det

STEPS = 12
VALIDATE_EVERY = 4


def main(core_context, increment_by: int) -> None:
    x = 0
    for step in range(STEPS):
        x += increment_by * (step + 1)  # not steps_completed: the test tells them apart
        steps_completed = step + 1
        time.sleep(0.02)
        core_context.train.report_training_metrics(steps_completed=steps_completed,
                                                   metrics={"x": x})
        if steps_completed % VALIDATE_EVERY == 0:
            core_context.train.report_validation_metrics(steps_completed=steps_completed,
                                                         metrics={"x": x})


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    with det.core.init() as core_context:
        main(core_context, increment_by=1)
