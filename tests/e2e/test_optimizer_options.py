"""Keras's optimizer options on 2 processes train what one does (issue 49).

tests/scripts/optimizer_options.py trains each of its variants (moving averages,
accumulation, clipping, AdamW, loss_scale_factor, schedules and callables, XLA,
steps_per_execution) in turn, in one run under ``horovodrun -np 2`` and one run as a
single process (the reference). XLA is turned off on 2 processes (Horovod's collectives
have no XLA kernels) and the processes add their gradients in another order than one
process sums its batch: the two agree to float32 rounding, not bit for bit.

This module's other half, each variant resumed after a stop (in-process):
tests/integration/test_optimizer_options.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tests.e2e.test_horovod import HOROVODRUN, run_for_json
from tests.support import SCRIPTS

SCRIPT = SCRIPTS / "optimizer_options.py"
sys.path.insert(0, str(SCRIPTS))


def _run(tmp: Path, processes: int) -> dict:
    env = {"OPTIONS_OUT": str(tmp / "out.json"), "DET_RUNS_DIR": str(tmp / "runs")}
    return run_for_json(SCRIPT, env, tmp / "out.json", processes)


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> dict:
    if not HOROVODRUN.exists():
        pytest.skip("horovodrun not installed")
    return _run(tmp_path_factory.mktemp("two"), 2)


@pytest.fixture(scope="module")
def one(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return _run(tmp_path_factory.mktemp("one"), 1)


def test_every_optimizer_option_trains_on_two_processes_what_one_does(two: dict,
                                                                      one: dict) -> None:
    import optimizer_options as oo  # the variants (the script's names, no TensorFlow run)

    assert (two["size"], one["size"]) == (2, 1)
    for variant in oo.VARIANTS:
        a, b = two[variant], one[variant]
        for key in ("weights", "slots"):
            assert len(a[key]) == len(b[key]), (variant, key)
            for x, y in zip(a[key], b[key]):
                np.testing.assert_allclose(x, y, rtol=1e-5, atol=2e-6,
                                           err_msg=f"{variant}: {key}")
        np.testing.assert_allclose(a["history"]["val_loss"], b["history"]["val_loss"],
                                   rtol=1e-5, err_msg=variant)
