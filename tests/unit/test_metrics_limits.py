"""The master's limits on a metrics report, checked in the training process (issue 37)."""

from __future__ import annotations

from pathlib import Path

import pytest

from det_sdk.errors import DetSdkError, MetricsLimitError
from det_sdk.session import LocalSession
from det_sdk.wire import MAX_METRIC_NAME_CHARS, MAX_METRICS_PER_REPORT, check_metrics


def test_limits_name_the_group_the_metric_and_the_limit() -> None:
    check_metrics("validation", {f"m{i}": 0.0 for i in range(MAX_METRICS_PER_REPORT)})
    check_metrics("training", {"x" * MAX_METRIC_NAME_CHARS: 1.0})
    with pytest.raises(MetricsLimitError, match=r"validation metrics report has 1001 "
                                                r"metrics; the master stores at most 1000"):
        check_metrics("validation", {f"m{i}": 0.0 for i in range(1001)})
    with pytest.raises(MetricsLimitError, match=r"training metric 'xxx.*': a metric name is "
                                                r"1 to 256 characters .* this one has 257"):
        check_metrics("training", {"x" * 257: 1.0})
    with pytest.raises(MetricsLimitError, match="evaluation metric ''"):
        check_metrics("evaluation", {"": 1.0})
    assert issubclass(MetricsLimitError, DetSdkError) and issubclass(MetricsLimitError,
                                                                      ValueError)


def test_a_local_run_refuses_what_the_master_would(tmp_path: Path) -> None:
    """The same script on the cluster would be refused: it stops here too, storing nothing."""
    s = LocalSession.create(tmp_path, hparams={}, seed=1, config={})
    with pytest.raises(MetricsLimitError, match="1001 metrics"):
        s.report_metrics("training", 1, 0, {f"m{i}": 0.0 for i in range(1001)})
    assert s.read_metrics() == []
    s.close()


def test_the_api_refuses_the_same_reports() -> None:
    pytest.importorskip("pydantic")
    from det_sdk import api

    with pytest.raises(ValueError, match="at most 1000"):
        api.MetricsReport(group="training", steps_completed=1,
                          metrics={f"m{i}": 0.0 for i in range(1001)})
    with pytest.raises(ValueError, match="at most 256 characters"):
        api.MetricsReport(group="training", steps_completed=1, metrics={"x" * 257: 0.0})
