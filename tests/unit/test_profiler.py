"""The profiler's sampler (det_sdk.profiler) without a master: its GPU path through a test
double of NVML (no GPU here: scripts/device/profiler_gpu_check.sh reads a real one), what
a local run writes, and what ``profiling:`` turns on or off."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest

from det_sdk.distributed import SingleProcess
from det_sdk.engine.run import open_run
from det_sdk.profiler import DEFAULT_RATE, ENABLED_RATE, Rate, SystemSampler


class FakeNvml:
    """A TEST DOUBLE of ``pynvml`` (nvidia-ml-py): two GPUs with fixed readings, answering
    the calls det_sdk.profiler makes. It proves only that the readings are shaped and
    reported as Determined's; that NVML is called right is checked on a real GPU by
    scripts/device/profiler_gpu_check.sh."""

    class NVMLError(Exception):
        pass

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    def nvmlInit(self) -> None:
        if self.fail:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        return f"GPU-{handle}".encode()  # older bindings answer bytes

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return types.SimpleNamespace(free=1000.0 * (handle + 1), used=10.0, total=0)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        return types.SimpleNamespace(gpu=40 + handle, memory=0)


def _run(nvml: Any) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    sampler = SystemSampler(got.extend, Rate(60, 10), host="node", nvml=nvml)
    sampler.start()
    sampler.stop()
    return got


def test_gpu_readings_are_reported_per_gpu_as_determined_shapes_them() -> None:
    (gpu,) = [r for r in _run(FakeNvml()) if r["group"] == "gpu"]
    assert gpu["metrics"] == {"node": {
        "GPU-0": {"gpu_util": 40.0, "gpu_free_memory": 1000.0, "gpu_memory_used": 10.0},
        "GPU-1": {"gpu_util": 41.0, "gpu_free_memory": 2000.0, "gpu_memory_used": 10.0}}}


@pytest.mark.parametrize("visible", ["1", "GPU-1"])
def test_only_the_gpus_cuda_visible_devices_gives_are_reported(
        visible: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    (gpu,) = [r for r in _run(FakeNvml()) if r["group"] == "gpu"]
    assert list(gpu["metrics"]["node"]) == ["GPU-1"]


def test_an_unusable_nvml_means_no_gpu_group() -> None:
    assert "gpu" not in {r["group"] for r in _run(FakeNvml(fail=True))}


def _local_run(tmp_path: Path, profiling: dict[str, Any] | None) -> list[dict[str, Any]]:
    config = {"profiling": profiling} if profiling is not None else {}
    run = open_run(SingleProcess(), config=config, runs_dir=tmp_path, hparams={})
    timer = run.session.profiler.timer if run.session.profiler else None
    if timer is not None:
        for _ in range(5):
            timer.batch_start()
            timer.data_ready()
            timer.step_end()
    run.session.close()
    path = tmp_path / "1" / "system.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] \
        if path.exists() else []


@pytest.mark.parametrize(("profiling", "rate"), [(None, DEFAULT_RATE),
                                                 ({"enabled": True}, ENABLED_RATE)])
def test_a_local_run_writes_its_system_metrics(tmp_path: Path, profiling: Any,
                                               rate: Rate) -> None:
    run = open_run(SingleProcess(), config={"profiling": profiling} if profiling else {},
                   runs_dir=tmp_path / "r", hparams={})
    assert run.session.profiler.rate == rate
    run.session.close()
    records = _local_run(tmp_path, {"begin_on_batch": 2, "end_after_batch": 3})
    assert {"cpu", "memory", "disk", "timings"} <= {r["group"] for r in records}
    (timings,) = [r for r in records if r["group"] == "timings"]
    (host,) = timings["metrics"]
    assert timings["metrics"][host]["batches"] == 2  # batches 2 and 3 of 5
    assert timings["steps_completed"] == 5


def test_profiling_disabled_starts_no_sampler_and_writes_nothing(tmp_path: Path) -> None:
    assert _local_run(tmp_path, {"enabled": False}) == []


def test_a_master_that_never_answers_holds_a_bounded_queue(tmp_path: Path) -> None:
    """A real socket that accepts and never answers: the report thread waits on the first
    report, and the session keeps at most 64 system reports queued, dropping the rest."""
    import socket

    from det_sdk.client import MasterClient
    from det_sdk.session import MasterSession
    from det_sdk.session import master as session_master

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(128)
    url = f"http://127.0.0.1:{server.getsockname()[1]}"
    info = types.SimpleNamespace(
        master_url=url, session_token="t", trial_id=1, experiment_id=1, config={},
        latest_checkpoint=None, allocation_id="a", task_type="TRIAL")
    session = MasterSession(info, client=MasterClient(url, "t", timeout=30))
    try:
        record = {"group": "cpu", "time": 1.0, "metrics": {"h": {"cpu_util_simple": 1.0}}}
        for _ in range(session_master._MAX_SYSTEM_PENDING + 10):
            session.report_system_metrics([record])
        assert session.system_dropped == 10
        assert session._queue.qsize() <= session_master._MAX_SYSTEM_PENDING
    finally:
        session.close(timeout=0.5)  # what is still queued is given up on, not waited for
        server.close()
