"""Core API tutorial, step 0 (its shape, written here): a plain loop on the cluster.

Nothing is reported: the trial ends COMPLETED when the script exits 0.
"""

import logging
import time

import det_sdk as det

STEPS = 10


def main(core_context, increment_by: int) -> None:
    x = 0
    for step in range(STEPS):
        x += increment_by
        time.sleep(0.05)
        logging.info("x is now %d after step %d", x, step + 1)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    with det.core.init() as core_context:
        main(core_context, increment_by=1)
