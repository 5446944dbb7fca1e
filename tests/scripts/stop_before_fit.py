"""Sends itself SIGTERM (or SIGINT with STOP_SIGNAL=INT) after init(), before fit: a clean exit,
and no run directory left behind (tests/e2e/test_same_on_n.py)."""

import os
import signal
import time

import det_sdk as det

context = det.keras.init(seed=1)
print(f"run {context.trial_id}", flush=True)
os.kill(os.getpid(), getattr(signal, "SIG" + os.environ.get("STOP_SIGNAL", "TERM")))
time.sleep(30)  # loading data, building the model...
print("not reached", flush=True)
