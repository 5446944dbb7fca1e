"""Metrics the master cannot store (tests/e2e/test_nothing_lost): too many in one report
(argv "many": refused before sending), or a report the master refuses (argv "refused":
a step beyond the API's integers)."""

import sys

import det_sdk as det

with det.core.init() as core:
    if sys.argv[1] == "many":
        core.train.report_training_metrics(1, {f"class_{i}_recall": 0.5 for i in range(1001)})
    else:
        core.train.report_training_metrics(2**60, {"loss": 0.5})
    print("trained on")
