"""A TensorFlow-free trial for the Determined CLI tests (tests/e2e/test_cli_determined.py).

Prints ``line 1`` .. ``line N`` (hyperparameter ``lines``), reports a validation ``loss``
and saves a checkpoint at steps 1 and 2 (loss 0.5, then 0.9: the best is the first, the
latest the second), then sleeps ``sleep`` seconds a step while checking for a request to
stop (``det e cancel``), so that a test can follow, kill or cancel it running.
"""

import json
import time

import det_sdk as det

info = det.get_cluster_info()
assert info is not None, "runs on the master"
hp = info.trial.hparams
with open("out.txt", "w") as f:  # a file of its working directory (det trial files)
    f.write("written by the trial")
for i in range(1, int(hp["lines"]) + 1):
    print(f"line {i}", flush=True)
with det.core.init() as core:
    for step, loss in ((1, 0.5), (2, 0.9)):
        core.train.report_validation_metrics(steps_completed=step, metrics={"loss": loss})
        # det_sdk ranks checkpoints by the metrics in their metadata
        with core.checkpoint.store_path({"steps_completed": step, "metrics": {"loss": loss}}
                                        ) as (path, uuid):
            (path / "state.json").write_text(json.dumps({"step": step}))
    for _ in range(int(hp["sleep"])):
        if core.preempt.should_preempt():
            print("asked to stop", flush=True)
            break
        time.sleep(1)
    print("done", flush=True)
