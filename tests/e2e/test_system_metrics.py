"""The profiler's system metrics (issue 60, item 1) on a real master: a tiny Core API trial
samples its machine with psutil by default, the master stores what it reports, and the
API, the Python client (``trial.iter_metrics("memory")``, 0.38's spelling, and
``"system"``) and the trial page's Profiler section in headless Chromium show it;
``profiling: {enabled: false}`` sends none.

One master for the module; the two experiments run side by side.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.browser import missing_reason, open_browser, signed_in_context
from harness.master import Cluster, create, describe, wait_for_experiment, wait_until
from tests.support import run_python

pytestmark = pytest.mark.stack_neutral

# the trial holds this much memory while it trains: its RSS must show it
HELD_MB = 64

SCRIPT = f"""
import time

import det_sdk as det

held = bytearray({HELD_MB} << 20)  # touched below: resident, not only reserved
held[::4096] = b"x" * len(held[::4096])
with det.core.init() as core_context:
    for step in range(1, 9):
        time.sleep(0.05)
        core_context.train.report_training_metrics(steps_completed=step,
                                                   metrics={{"loss": 1.0 / step}})
"""


@pytest.fixture(scope="module")
def trials(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, int]:
    """The trial of each config: ``default`` (no profiling section) and ``off``
    (``profiling: {enabled: false}``), both COMPLETED."""
    model = tmp_path_factory.mktemp("sysmet")
    (model / "train.py").write_text(SCRIPT)
    base = {"entrypoint": "python3 train.py", "max_restarts": 0,
            "searcher": {"name": "single", "metric": "loss", "max_length": 1}}
    configs = {"default": base, "off": {**base, "profiling": {"enabled": False}}}
    exps = {}
    for name, cfg in configs.items():
        path = model.parent / f"{model.name}-{name}.yaml"
        path.write_text(yaml.safe_dump({**cfg, "name": f"sysmet-{name}"}))
        exps[name] = create(cluster, path, model)
    out = {}
    for name, exp in exps.items():
        info = wait_for_experiment(cluster, exp, f"the {name} trial", timeout=120)
        (trial,) = info["trials"]
        assert trial["state"] == "COMPLETED", trial
        out[name] = trial["id"]
    return out


def _system(cluster: Cluster, trial_id: int, **params: Any) -> list[dict[str, Any]]:
    with cluster.http() as http:
        r = http.get(f"/api/v1/trials/{trial_id}/system-metrics", params=params)
    assert r.status_code == 200, r.text
    return r.json()


def test_psutil_readings_reach_the_api_and_the_client(cluster: Cluster,
                                                      trials: dict[str, int]) -> None:
    rows = _system(cluster, trials["default"])
    assert {"cpu", "memory", "disk", "network"} <= {r["group"] for r in rows}, rows
    memory = [r for r in rows if r["group"] == "memory"]
    # Determined's shape: one host (the agent) holding the metrics
    ((host, values),) = memory[-1]["metrics"].items()
    assert host
    rss = values["process_rss"]
    assert HELD_MB << 20 < rss < 16 << 30, values  # what it holds, and not absurd
    assert values["memory_free"] > 0
    ((_, cpu),) = next(r for r in rows if r["group"] == "cpu")["metrics"].items()
    assert 0 <= cpu["cpu_util_simple"] <= 100
    assert _system(cluster, trials["default"], group="disk", limit=1)[0]["group"] == "disk"

    # the Python client, in a process of its own, as a user runs it
    probe = textwrap.dedent(f"""
        import json
        from det_sdk.experimental import client
        client.login(master={cluster.url!r})
        trial = client.get_trial({trials["default"]})
        memory = list(trial.iter_metrics("memory"))
        groups = sorted({{m.group for m in trial.iter_metrics("system")}})
        print(json.dumps({{"rss": [list(m.metrics.values())[0]["process_rss"] for m in memory],
                          "groups": groups}}))
    """)
    out = subprocess.run([sys.executable, "-c", probe], env=cluster.env, capture_output=True,
                         text=True, timeout=60, cwd=cluster.root)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["rss"] == [r["metrics"][host]["process_rss"] for r in memory]
    assert {"cpu", "memory", "disk", "network"} <= set(got["groups"])


def test_profiling_disabled_sends_none(cluster: Cluster, trials: dict[str, int]) -> None:
    assert _system(cluster, trials["off"]) == []


def test_reports_are_checked_and_reads_need_a_token(cluster: Cluster,
                                                    trials: dict[str, int]) -> None:
    trial = trials["off"]
    good = {"group": "cpu", "time": 1.0, "metrics": {"h": {"cpu_util_simple": 1.0}}}
    with cluster.http(token=None) as anon:
        assert anon.get(f"/api/v1/trials/{trial}/system-metrics").status_code == 401
        assert anon.get(f"/ui/api/trials/{trial}/system-metrics").status_code == 401
    with cluster.http() as http:
        bad = http.post(f"/api/v1/trials/{trial}/system-metrics",
                        json={"records": [{**good, "group": "CPU!"}]})
        assert bad.status_code == 400 and "group" in bad.text, bad.text
        deep = {**good, "metrics": {"h": {"a": {"b": {"c": 1.0}}}}}
        assert http.post(f"/api/v1/trials/{trial}/system-metrics",
                         json={"records": [deep]}).status_code == 400
        for field, boolean in (("time", {**good, "time": False}),
                               ("metrics", {**good, "metrics": {"h": {"x": True}}})):
            # a JSON boolean is not a number (pydantic alone would store it as 0.0/1.0)
            refused = http.post(f"/api/v1/trials/{trial}/system-metrics",
                                json={"records": [boolean]})
            assert refused.status_code == 400 and field in refused.text, refused.text
        assert http.post("/api/v1/trials/999999/system-metrics",
                         json={"records": [good]}).status_code == 404
    assert _system(cluster, trial) == []  # nothing half-written


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    reason = missing_reason()
    if reason:
        pytest.skip(f"page tests need headless Chromium: {reason}")
    with open_browser() as b:
        yield b


def test_trial_page_profiler_section_charts_them(browser: Any, cluster: Cluster,
                                                 trials: dict[str, int]) -> None:
    trial = trials["default"]
    page = signed_in_context(browser, cluster.url, cluster.token).new_page()
    page.goto(f"{cluster.url}/ui/#/trials/{trial}")
    page.wait_for_function("(document.querySelector('#profiler-charts') || {dataset: {}})"
                           ".dataset.groups?.includes('memory')", timeout=30_000)
    assert page.locator("h2#profiler").inner_text() == "Profiler"
    # the memory chart's series hold the stored values (uPlot's data: x, then each series)
    drawn = page.evaluate("""() => {
        const u = window.detCharts['profiler-memory'];
        return {labels: u.series.slice(1).map((s) => s.label), data: u.data.slice(1)};
    }""")
    rss = [r["metrics"] for r in _system(cluster, trial, group="memory")]
    ((host, _),) = rss[0].items()
    i = drawn["labels"].index(f"{host} · process_rss")
    assert [v for v in drawn["data"][i] if v is not None] == \
        [m[host]["process_rss"] for m in rss]
    assert page.locator("#profiler-empty").is_hidden()


TRAINER = """
import time

import torch
from torch import nn

from det_sdk import pytorch


class Slow(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        time.sleep(0.005)  # 4 rows a batch: a batch waits >= 20 ms for its data
        return torch.ones(4), torch.zeros(1)


class Trial(pytorch.PyTorchTrial):
    def __init__(self, context):
        self.context = context
        self.model = context.wrap_model(nn.Linear(4, 1))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.1))

    def build_training_data_loader(self):
        return pytorch.DataLoader(Slow(), batch_size=4)

    def build_validation_data_loader(self):
        return pytorch.DataLoader(Slow(), batch_size=16)

    def train_batch(self, batch, epoch_idx, batch_idx):
        x, y = batch
        loss = ((self.model(x) - y) ** 2).mean()
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        time.sleep(0.03)  # the step takes >= 30 ms
        return {"loss": loss}

    def evaluate_batch(self, batch, batch_idx):
        x, y = batch
        return {"validation_loss": ((self.model(x) - y) ** 2).mean().item()}


config = {"profiling": {"enabled": True, "begin_on_batch": 3, "end_after_batch": 10}}
with pytorch.init(config=config, runs_dir="runs") as context:
    pytorch.Trainer(Trial(context), context).fit(max_length=pytorch.Batch(12))
"""


def test_pytorch_trainer_times_data_wait_step_and_checkpoint(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "train.py").write_text(TRAINER)
    out = run_python(tmp_path / "train.py", {"PYTHONPATH": str(Path(__file__).parents[2])},
                     cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    records = [json.loads(line) for line in
               (tmp_path / "runs" / "1" / "system.jsonl").read_text().splitlines()]
    timings = [next(iter(r["metrics"].values())) for r in records if r["group"] == "timings"]
    assert sum(t["batches"] for t in timings) == 8  # batches 3..10 of 12
    timed = [t for t in timings if t["batches"]]
    assert all(t["data_wait_s"] >= 0.02 and t["step_s"] >= 0.03 for t in timed), timings
    assert sum(t["checkpoint_blocked_s"] for t in timings) > 0  # the end's checkpoint


HOLD = """
import pathlib
import time

import det_sdk as det

with det.core.init() as core_context:
    deadline = time.time() + 90
    while not pathlib.Path({release!r}).exists() and time.time() < deadline:
        time.sleep(0.1)
    core_context.train.report_training_metrics(steps_completed=1, metrics={{"loss": 1.0}})
"""


def test_det_slot_list_shows_who_holds_each_slot_and_its_gpus(
        cluster: Cluster, tmp_path: Path) -> None:
    release = tmp_path / "release"
    (tmp_path / "hold.py").write_text(HOLD.format(release=str(release)))
    config = tmp_path / "hold.yaml"
    config.write_text(yaml.safe_dump({
        "name": "sysmet-hold", "entrypoint": "python3 hold.py", "max_restarts": 0,
        "searcher": {"name": "single", "metric": "loss", "max_length": 1}}))
    exp = create(cluster, config, tmp_path)
    try:
        trial = wait_until("the trial to run", lambda: next(
            (t["id"] for t in describe(cluster, exp)["trials"] if t["state"] == "RUNNING"),
            None), timeout=60)
        # a GPU's reading as the profiler sends it (no GPU here: the master's join is
        # what this checks; scripts/device/profiler_gpu_check.sh reads a real one)
        gpu = {"group": "gpu", "time": 1.0, "metrics": {"node": {"GPU-abc": {
            "gpu_util": 87.0, "gpu_free_memory": 1.0, "gpu_memory_used": 3 * 2**30}}}}
        with cluster.http() as http:
            r = http.post(f"/api/v1/trials/{trial}/system-metrics", json={"records": [gpu]})
            assert r.status_code == 200 and r.json() == {"stored": 1, "dropped": 0}, r.text
        slots = cluster.det_json("slot", "list")
        assert [s["slot"] for s in slots] == [0, 1]  # the cluster's 2 slots
        held = [s for s in slots if s["task_id"] == f"trial-{trial}"]
        assert len(held) == 1 and held[0]["type"] == "TRIAL", slots
        assert [s["task_id"] for s in slots if s is not held[0]] == [None]
        out = cluster.det("slot", "list")
        assert out.returncode == 0, out.stderr
        assert f"trial-{trial}" in out.stdout and "GPU-abc 87% 3.0 GiB" in out.stdout, out.stdout
    finally:
        release.touch()
    wait_for_experiment(cluster, exp, "the held trial", timeout=60)
