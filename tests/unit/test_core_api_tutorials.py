"""Determined's Core API tutorials 0-3 (issue 29), as their configs are written: every
config in tests/core_api_tutorial parses with nothing ignored.

The tutorials run on a real master in this module's other half,
tests/e2e/test_core_api_tutorials.py, which says what each one covers.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest
import yaml

from det_sdk.config import launch_warnings, parse_experiment_config

TUTORIAL = Path(__file__).resolve().parents[1] / "core_api_tutorial"
CONFIGS = sorted(TUTORIAL.glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_tutorial_config_parses_with_nothing_ignored(
        path: Path, caplog: pytest.LogCaptureFixture) -> None:
    raw = yaml.safe_load(path.read_text())
    with warnings.catch_warnings(), caplog.at_level(logging.WARNING):
        warnings.simplefilter("error")
        cfg = parse_experiment_config(raw, warn_ignored=True)
    assert cfg.ignored_fields == [] and caplog.records == []
    assert cfg.entrypoint_runs == "per_node"  # Determined's `entrypoint:` command
    if cfg.resources.slots_per_trial == 1:  # 4_distributed's own launcher is a plain script
        assert launch_warnings(cfg) == []
    # the master stores the dumped config and reads it back: the same
    assert parse_experiment_config(cfg.model_dump(mode="json")) == cfg


def test_the_tutorial_configs_are_in_both_eras() -> None:
    names = {p.name for p in CONFIGS}
    assert {"0_start.yaml", "1_metrics.yaml", "2_checkpoints.yaml", "3_hpsearch_old.yaml",
            "3_hpsearch_new.yaml"} <= names
    for name in ("0_start.yaml", "1_metrics.yaml", "2_checkpoints.yaml"):
        searcher = yaml.safe_load((TUTORIAL / name).read_text())["searcher"]
        assert searcher == {"name": "single", "metric": "x", "max_length": 1}
    old = parse_experiment_config(TUTORIAL / "3_hpsearch_old.yaml").searcher
    new = parse_experiment_config(TUTORIAL / "3_hpsearch_new.yaml").searcher
    assert old.max_length is not None and old.time_metric is None and old.budget == 20
    assert new.max_length is None and (new.time_metric, new.budget) == ("batches", 20)
