"""The PyTorch script context's streamed ``context.predict(..., output=)`` on N processes,
run by tests/e2e/test_pytorch_predict_stream.py.

Environment: ``PRED_OUT`` (the output directory), ``PRED_ROWS``; ``PRED_FAIL_AT``: the
row whose read fails (on the process that reads it); ``PRED_STOP_AFTER``: the chief's
session says the master asks the task to stop from its ``n+1``-th question on (what the
master's preemption long-poll sets on the cluster, emulated on the real local session);
``PRED_SLEEP``: seconds each row's read takes (a test kills the run mid-stream).
``PRED_OUT`` may be an ``s3://``/``gs://``/``az://`` URL (credentials from the environment).
The model's weights are drawn from a fixed seed: every run predicts the same values.
"""

import os
import sys
import time

import numpy as np
import torch

import det_sdk.pytorch as pytorch

ROWS = int(os.environ.get("PRED_ROWS", "103"))
FAIL_AT = os.environ.get("PRED_FAIL_AT")
STOP_AFTER = os.environ.get("PRED_STOP_AFTER")
SLEEP = float(os.environ.get("PRED_SLEEP", "0"))


class Rows(torch.utils.data.Dataset):
    def __init__(self) -> None:
        rng = np.random.default_rng(0)
        self.x = torch.from_numpy(rng.normal(size=(ROWS, 4)).astype("float32"))

    def __len__(self) -> int:
        return ROWS

    def __getitem__(self, i: int):
        if FAIL_AT is not None and i == int(FAIL_AT):
            raise OSError("the node went away")
        if SLEEP:
            time.sleep(SLEEP)
        return self.x[i], torch.zeros(1)


torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
with pytorch.init(hparams={"global_batch_size": 4}) as context:
    if STOP_AFTER is not None:
        session, asked = context._core._session, [0]

        def should_preempt() -> bool:
            asked[0] += 1
            return asked[0] > int(STOP_AFTER)

        session.should_preempt = should_preempt
    out = context.predict(model, Rows(), output=os.environ["PRED_OUT"])
    print(f"rank {context.distributed.rank}: {out.rows} rows, {out.resumed} parts kept",
          file=sys.stderr)
