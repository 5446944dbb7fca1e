"""A TensorFlow-free trial of Determined's shape that resumes (tests/e2e/test_cli_determined.py's
``det e continue``): restores ``state.json`` from the latest checkpoint, trains each searcher
operation one step at a time (a checkpoint and a validation ``loss`` = 1/step each), and
prints what it did, so that the test sees where a continued trial started.
"""

import json

import det_sdk as det

with det.core.init() as core:
    step = 0
    latest = core.info.latest_checkpoint  # DET_LATEST_CHECKPOINT: a continue sets it
    if latest:
        with core.checkpoint.restore_path(latest) as path:
            step = json.loads((path / "state.json").read_text())["step"]
    print(f"starts at step {step}", flush=True)
    for op in core.searcher.operations():
        while step < op.length:
            step += 1
            loss = 1.0 / step
            core.train.report_validation_metrics(steps_completed=step, metrics={"loss": loss})
            with core.checkpoint.store_path({"steps_completed": step, "metrics": {"loss": loss}}
                                            ) as (path, uuid):
                (path / "state.json").write_text(json.dumps({"step": step}))
            print(f"trained step {step}", flush=True)
        op.report_completed(1.0 / step)
