"""Experiments side by side (issue 60, item 4) on a real master: the compare page in
headless Chromium, chosen from the experiment list, and the Python client's records.

Two one-trial experiments of a TensorFlow-free script (det.core reports three training
losses and a validation loss scaled by its ``lr``): they differ in ``lr`` and in the
config's ``max_restarts``, and share ``units``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.browser import missing_reason, open_browser, signed_in_context
from harness.master import Cluster, create, describe

pytestmark = pytest.mark.stack_neutral

TRAIN = """\
import det_sdk as det
with det.core.init() as core:
    lr = core.hparams["lr"]
    for step in (1, 2, 3):
        core.train.report_training_metrics(steps_completed=step, metrics={"loss": lr * (4 - step)})
    core.train.report_validation_metrics(steps_completed=3, metrics={"val_loss": lr})
"""
LRS = {"cmp-a": 0.5, "cmp-b": 0.25}
SCREENSHOTS = os.environ.get("DET_UI_SCREENSHOTS")  # docs/ui: docs/compare.md's picture


@pytest.fixture(scope="module")
def pair(cluster: Cluster) -> dict[str, int]:
    """The two experiments, finished: {name: experiment id}."""
    model = cluster.root / "cmp-model"
    model.mkdir()
    (model / "train.py").write_text(TRAIN)
    ids = {}
    for restarts, (name, lr) in enumerate(LRS.items()):
        path = cluster.root / f"{name}.yaml"
        path.write_text(json.dumps({
            "name": name, "entrypoint_script": "python3 train.py", "max_restarts": restarts,
            "searcher": {"name": "single", "metric": "val_loss",
                         "max_length": {"batches": 3}},
            "hyperparameters": {"lr": lr, "units": 8}}))
        ids[name] = create(cluster, path, model)
    for name, exp in ids.items():
        out = cluster.det("experiment", "wait", str(exp))
        assert out.returncode == 0, (name, out.stdout, out.stderr)
        assert describe(cluster, exp)["state"] == "COMPLETED", describe(cluster, exp)
    return ids


@pytest.fixture(scope="module")
def browser() -> Any:
    reason = missing_reason()
    if reason:
        pytest.skip(f"page tests need headless Chromium: {reason}")
    with open_browser() as b:
        yield b


def test_compare_page_from_the_experiment_list(browser: Any, cluster: Cluster,
                                               pair: dict[str, int]) -> None:
    """Tick both experiments, Compare: a chart per metric with both trials' lines, the
    hyperparameter table with ``lr`` (and the config's ``max_restarts``) marked as
    differing, ``units`` not; "Only differences" hides ``units``. Then trials ticked on
    each experiment's page, compared. Under the UI's Content-Security-Policy, with no
    violation."""
    a, b = pair["cmp-a"], pair["cmp-b"]
    trial = {name: describe(cluster, exp)["trials"][0]["id"] for name, exp in pair.items()}
    context = signed_in_context(browser, cluster.url, cluster.token, enforce_csp=True)
    context.add_init_script("""window.__csp = [];
        document.addEventListener('securitypolicyviolation',
            (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));""")
    page = context.new_page()
    page.goto(f"{cluster.url}/ui/#/experiments")
    page.wait_for_selector("body[data-ready='#/experiments']")
    assert page.is_disabled("#exp-compare")
    for exp in (b, a):
        page.check(f"#experiments input.cmp-pick[data-id='{exp}']")
    page.click("#exp-compare")
    page.wait_for_selector(f"body[data-ready='#/compare?experiments={a},{b}']")
    page.wait_for_selector("#cmp-chart-loss canvas")

    drawn = page.evaluate("""() => Object.fromEntries(['cmp-chart-loss'].map((k) => {
        const u = window.detCharts[k];
        return [k, u.series.slice(1).map((s, i) =>
            [s.label, u.data[0].filter((x, j) => u.data[i + 1][j] != null)
                        .map((x, j) => [x, u.data[i + 1].filter(v => v != null)[j]])])];
    }))""")["cmp-chart-loss"]
    lines = dict((label, points) for label, points in drawn)
    for name, lr in LRS.items():
        t = trial[name]
        assert lines[f"trial {t} training: loss"] == [[1, 3 * lr], [2, 2 * lr], [3, lr]]
        assert lines[f"trial {t} validation: val_loss"] == [[3, lr]]
    assert len(lines) == 4

    heads = page.eval_on_selector_all("#compare-table thead th[data-trial]",
                                      "els => els.map(e => Number(e.dataset.trial))")
    assert heads == [trial["cmp-a"], trial["cmp-b"]]
    lr_row = page.locator("#compare-table tr[data-key='hp.lr']")
    assert lr_row.get_attribute("class") == "differs"
    assert lr_row.locator("td").all_text_contents() == ["0.5", "0.25"]
    assert page.get_attribute("#compare-table tr[data-key='hp.units']", "class") == "same"
    assert page.get_attribute("#compare-table tr[data-key='cfg.max_restarts']",
                              "class") == "differs"
    assert page.get_attribute("#compare-table tr[data-key='cfg.searcher.metric']",
                              "class") == "same"
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SCREENSHOTS) / "compare.png"), full_page=True)
    page.check("#cmp-only-diff")
    assert page.is_hidden("#compare-table tr[data-key='hp.units']")
    assert page.is_visible("#compare-table tr[data-key='hp.lr']")

    # a column left out: the comparison goes on with the other trial only
    page.click(f"#compare-table button[data-remove='{trial['cmp-a']}']")
    page.wait_for_selector(f"body[data-ready='#/compare?trials={trial['cmp-b']}']")
    page.wait_for_selector(f"#cmp-charts[data-trials='{trial['cmp-b']}'] canvas")

    # trials across experiments: ticked on each experiment's page, then compared
    for exp, name in ((b, "cmp-b"), (a, "cmp-a")):
        page.goto(f"{cluster.url}/ui/#/experiments/{exp}")
        page.wait_for_selector(f"body[data-ready='#/experiments/{exp}']")
        page.check(f"#trials input.cmp-pick-trial[data-id='{trial[name]}']")
    assert page.text_content("#trials-compare") == "Compare 2 ticked trials"
    page.click("#trials-compare")
    both = f"{trial['cmp-a']},{trial['cmp-b']}"
    page.wait_for_selector(f"body[data-ready='#/compare?trials={both}']")
    page.wait_for_selector(f"#cmp-charts[data-trials='{both}'] canvas")
    assert page.get_attribute("#compare-table tr[data-key='hp.lr']", "class") == "differs"
    assert page.evaluate("window.__csp") == []
    context.close()


def test_client_compare_gives_dataframe_ready_records_and_the_differences(
        cluster: Cluster, pair: dict[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    from det_sdk.client import MasterError
    from det_sdk.experimental import client

    monkeypatch.setenv("DET_USER_TOKEN", cluster.token)
    d = client.Determined(cluster.url)
    a, b = pair["cmp-a"], pair["cmp-b"]
    trial = {name: describe(cluster, exp)["trials"][0]["id"] for name, exp in pair.items()}
    c = d.compare(experiment_ids=[a, b])
    assert c.trial_ids == [trial["cmp-a"], trial["cmp-b"]]
    expected = []
    for name, lr in LRS.items():
        exp, t = pair[name], trial[name]
        base = {"experiment_id": exp, "trial_id": t}
        hps = {"hp.lr": lr, "hp.units": 8}
        expected += [{**base, "group": "training", "steps_completed": s, "epoch": 0, **hps,
                      "loss": lr * (4 - s)} for s in (1, 2, 3)]
        expected.append({**base, "group": "validation", "steps_completed": 3, "epoch": 0,
                         **hps, "val_loss": lr})
    assert c.records == expected
    diff = c.differences()
    assert diff["hparams"] == {"lr": {trial["cmp-a"]: 0.5, trial["cmp-b"]: 0.25}}
    assert diff["config"]["max_restarts"] == {trial["cmp-a"]: 0, trial["cmp-b"]: 1}
    assert "searcher.metric" not in diff["config"] and "units" not in diff["hparams"]
    assert {r["name"] for r in c.table(only_differences=True)} >= {"lr", "max_restarts"}
    assert c.downsampled == []

    # trials across experiments, by id
    assert d.compare(trial_ids=[trial["cmp-b"]]).trial_ids == [trial["cmp-b"]]
    with pytest.raises(MasterError) as err:  # over the limit: refused, naming it
        d.compare(trial_ids=list(range(1, 52)))
    assert err.value.status == 400 and "50" in str(err.value)
    with pytest.raises(MasterError) as err:
        d.compare(experiment_ids=[10**6])
    assert err.value.status == 404

    # who may call: the user's token, or a signed-in UI session; nobody else
    anon = httpx.Client(base_url=cluster.url, timeout=30)
    assert anon.get("/api/v1/compare", params={"experiment_ids": a}).status_code == 401
    assert anon.get("/ui/api/compare", params={"experiment_ids": a}).status_code == 401
