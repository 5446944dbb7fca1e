"""Logs searched (issue 60): a real two-rank trial under horovodrun on a real master, its
log filtered by rank, level, stream, source and time through the real `det` CLI
(Determined's flags, `--json` as Determined's records), through the Python client
(`Trial.iter_logs(search_text=...)`), and a big log paged at a bounded read per request.
"""

from __future__ import annotations

import json
import sys
import textwrap
from typing import Any

import pytest

from det_sdk.master.log_search import SCAN_BYTES
from harness.master import Cluster, api, create, wait_for_experiment

# Stack-neutral: the master, the CLI and the UI; no Keras in these runs
pytestmark = pytest.mark.stack_neutral

# each rank prints three INFO lines, rank 1 a WARNING; each an ERROR on stderr; rank 0 the
# needle (det.LOG_FORMAT's "LEVEL: [pid] logger: message")
RANKS_SCRIPT = """
import os, sys
rank = int(os.environ.get("HOROVOD_RANK", "0"))
for i in range(3):
    print(f"INFO: [{os.getpid()}] train: rank {rank} step {i}", flush=True)
if rank == 1:
    print("WARNING: rank 1 is slow", flush=True)
print(f"ERROR: boom on rank {rank}", file=sys.stderr, flush=True)
if rank == 0:
    print("the needle-60 is here", flush=True)
"""

# about 24 MiB of log, the needle on its last line
BIG_SCRIPT = """
import sys
line = "filler " * 14 + "\\n"
for _ in range(240):
    sys.stdout.write(line * 2000)
sys.stdout.write("the big-needle at the end\\n")
sys.stdout.flush()
"""


def _experiment(cluster: Cluster, name: str, script: str, slots: int) -> tuple[int, int]:
    model = cluster.root / name
    model.mkdir()
    (model / "train.py").write_text(textwrap.dedent(script))
    config = cluster.write_config(name, entrypoint_script="python3 train.py", max_restarts=0,
                                  resources={"slots_per_trial": slots},
                                  searcher={"name": "single", "metric": "loss",
                                            "max_length": {"batches": 1}})
    exp = create(cluster, config, model)
    info = wait_for_experiment(cluster, exp, name, timeout=240)
    return exp, info["trials"][0]["id"]


@pytest.fixture(scope="module")
def ranks(cluster: Cluster) -> tuple[int, int]:
    """(experiment, trial) of the two-rank run, ended."""
    return _experiment(cluster, "ranks", RANKS_SCRIPT, slots=2)


def _det(cluster: Cluster, *args: str) -> str:
    out = cluster.det(*args)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return out.stdout


def test_det_trial_logs_filters_by_rank_level_stream_and_time(cluster: Cluster,
                                                             ranks: tuple[int, int]) -> None:
    exp, trial = ranks
    t = str(trial)
    everything = _det(cluster, "trial", "logs", t)
    assert "[0]<stdout>:INFO:" in everything and "[1]<stderr>:ERROR: boom on rank 1" in everything

    rank1 = _det(cluster, "trial", "logs", t, "--rank-id", "1")
    assert "rank 1 step 0" in rank1 and "boom on rank 1" in rank1
    assert "rank 0 step" not in rank1 and "boom on rank 0" not in rank1

    warnings = _det(cluster, "t", "logs", t, "--level", "WARNING").splitlines()
    assert sorted(line.split(":", 1)[1] for line in warnings) == [
        "ERROR: boom on rank 0", "ERROR: boom on rank 1", "WARNING: rank 1 is slow"]

    stderr = _det(cluster, "t", "logs", t, "--stdtype", "stderr").splitlines()
    assert len(stderr) == 2 and all("<stderr>" in line for line in stderr), stderr

    # the time window: nothing after the future, everything before it
    assert _det(cluster, "t", "logs", t, "--rank-id", "0",
                "--timestamp-after", "2999-01-01T00:00:00Z") == ""
    before = _det(cluster, "t", "logs", t, "--rank-id", "0",
                  "--timestamp-before", "2999-01-01T00:00:00Z")
    assert "rank 0 step 2" in before

    # det e logs: the first trial's, the same filters; --head of the matches (one stream:
    # horovodrun interleaves a rank's stdout and stderr as they come)
    head = _det(cluster, "e", "logs", str(exp), "--rank-id", "0", "--stdtype", "stdout",
                "--head", "2").splitlines()
    assert [line.split("train: ")[1] for line in head] == ["rank 0 step 0", "rank 0 step 1"]

    # -f with a filter: an ended trial's matches, then exit 0
    assert _det(cluster, "t", "logs", t, "-f", "--rank-id", "1", "--stdtype", "stderr") == \
        "[1]<stderr>:ERROR: boom on rank 1\n"

    # --json: Determined's records, one a line
    records = [json.loads(line) for line in
               _det(cluster, "t", "logs", t, "--json", "--tail", "3").splitlines()]
    assert len(records) == 3
    for rec in records:
        assert set(rec) == {"id", "level", "message", "timestamp", "trialId", "agentId",
                            "containerId", "log", "rankId", "source", "stdtype"}
        assert rec["trialId"] == trial and rec["source"] in ("task", "master")
        assert rec["timestamp"].endswith("Z") and rec["level"].startswith("LOG_LEVEL_")
    err = next(r for r in _records(cluster, trial, levels=["LOG_LEVEL_ERROR"], rank_ids=[1]))
    assert err["stdtype"] == "stderr" and err["log"] == "boom on rank 1\n"
    assert "[rank=1] || ERROR: boom on rank 1" in err["message"]


def _records(cluster: Cluster, trial: int, **params: Any) -> list[dict[str, Any]]:
    r = api(cluster).get(f"/api/v1/trials/{trial}/logs/records", params=params)
    assert r.status_code == 200, r.text
    return list(r.json()["records"])


def test_bad_filters_are_refused_naming_the_field(cluster: Cluster,
                                                  ranks: tuple[int, int]) -> None:
    t = str(ranks[1])
    out = cluster.det("t", "logs", t, "--timestamp-after", "yesterday")
    assert out.returncode != 0 and "timestamp_after" in out.stderr
    out = cluster.det("t", "logs", t, "--level", "LOUD")
    assert out.returncode != 0 and "--level" in out.stderr
    r = api(cluster).get(f"/api/v1/trials/{t}/logs/records", params={"levels": "LOUD"})
    assert r.status_code == 400 and "levels" in r.text
    r = api(cluster).get(f"/api/v1/trials/{t}/logs/records",
                         params={"search_text": "x" * 5000})
    assert r.status_code == 400


def test_python_client_search_text_and_filters(cluster: Cluster, ranks: tuple[int, int],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from det_sdk.experimental import Determined, LogLevel

    monkeypatch.setenv("DET_USER_TOKEN", cluster.token)
    d = Determined(master=cluster.url)
    trial = d.get_trial(ranks[1])
    found = list(trial.iter_logs(search_text="needle-60"))
    assert len(found) == 1 and found[0].endswith("the needle-60 is here\n"), found
    errors = list(trial.logs(min_level=LogLevel.ERROR, rank_ids=[1]))
    assert len(errors) == 1 and "boom on rank 1" in errors[0]
    assert len(list(trial.iter_logs(tail=2))) == 2


def test_ui_log_view_filters_by_text_level_and_rank(cluster: Cluster,
                                                    ranks: tuple[int, int]) -> None:
    """One page load of the trial page in headless Chromium; the log view's filter box and
    its level and rank selects narrow the lines shown."""
    from harness.browser import missing_reason, open_browser, signed_in_context

    reason = missing_reason()
    if reason:
        pytest.skip(f"page tests need headless Chromium: {reason}")
    trial = ranks[1]
    with open_browser() as browser:
        page = signed_in_context(browser, cluster.url, cluster.token).new_page()
        page.goto(f"{cluster.url}/ui/#/trials/{trial}")
        page.wait_for_function("document.querySelector('#log') && "
                               "document.querySelector('#log').textContent.includes('step 2')")
        assert "boom on rank 0" in page.text_content("#log")

        def shown_when(predicate: str) -> list[str]:
            page.wait_for_function("(() => { const t = document.querySelector('#log')"
                                   f".textContent; return {predicate}; }})()")
            return str(page.text_content("#log")).splitlines()

        page.fill("#log-filter", "needle-60")
        assert shown_when("t.includes('needle') && !t.includes('step')") == [
            "[0]<stdout>:the needle-60 is here"]
        page.fill("#log-filter", "")
        page.select_option("#log-level", "ERROR")
        lines = shown_when("t.includes('boom') && !t.includes('step')")
        assert sorted(lines) == ["[0]<stderr>:ERROR: boom on rank 0",
                                 "[1]<stderr>:ERROR: boom on rank 1"]
        page.select_option("#log-rank", "1")
        assert shown_when("!t.includes('rank 0')") == ["[1]<stderr>:ERROR: boom on rank 1"]
        page.select_option("#log-level", "")
        page.select_option("#log-rank", "")
        shown_when("t.includes('step 2') && t.includes('boom on rank 0')")  # the whole log again
        page.context.close()


def test_a_big_log_is_paged_at_a_bounded_read(cluster: Cluster) -> None:
    _exp, trial = _experiment(cluster, "big", BIG_SCRIPT, slots=1)
    size = (cluster.data_dir / "trials" / str(trial) / "logs.txt").stat().st_size
    assert size > 5 * SCAN_BYTES
    pages, offset, found = 0, 0, []
    while True:
        r = api(cluster).get(f"/api/v1/trials/{trial}/logs/records",
                             params={"search_text": "big-needle", "offset": offset})
        assert r.status_code == 200, r.text
        page = r.json()
        assert page["scanned"] <= SCAN_BYTES
        pages += 1
        found += page["records"]
        offset = page["cursor"]
        if page["done"]:
            break
        assert pages < 100, "the pages never end"
    assert pages >= size // SCAN_BYTES
    assert [rec["log"] for rec in found] == ["the big-needle at the end\n"]
    # backwards (--tail) from the end: one bounded read finds the last lines
    r = api(cluster).get(f"/api/v1/trials/{trial}/logs/records",
                         params={"order": "desc", "limit": 1})
    assert r.json()["scanned"] <= SCAN_BYTES
    assert r.json()["records"][0]["log"] == "the big-needle at the end\n"
    # and the CLI pages through it the same way
    out = cluster.det("t", "logs", str(trial), "--source", "task", "--tail", "1")
    assert out.stdout == "the big-needle at the end\n", out.stderr


# one process: its two streams land in one logs.txt, lines of each alternating, one line
# without its newline last (held back by det_sdk.launch.catch, then passed on)
STREAMS_SCRIPT = """
import sys
for i in range(5):
    print(f"out line {i}", flush=True)
    print(f"err line {i}", file=sys.stderr, flush=True)
sys.stderr.write("err unfinished")
"""


def test_one_slot_lines_keep_their_stream(cluster: Cluster) -> None:
    """A one-process task's stdout and stderr share logs.txt; the stream index that
    det_sdk.launch.catch writes beside it gives each line its stream, and a log without
    one (a run older than the index) still reads, without streams."""
    _exp, trial = _experiment(cluster, "streams", STREAMS_SCRIPT, slots=1)
    t = str(trial)
    stderr = _det(cluster, "t", "logs", t, "--stdtype", "stderr").splitlines()
    assert sorted(stderr) == [*(f"err line {i}" for i in range(5)), "err unfinished"], stderr
    stdout = _det(cluster, "trial", "logs", t, "--stdtype", "stdout").splitlines()
    assert sorted(stdout) == [f"out line {i}" for i in range(5)], stdout
    records = [json.loads(line) for line in _det(cluster, "t", "logs", t, "--json").splitlines()]
    by_text = {rec["log"].strip(): rec["stdtype"] for rec in records if rec["source"] == "task"}
    assert {k: v for k, v in by_text.items() if "line" in k or "unfinished" in k} == {
        **{f"out line {i}": "stdout" for i in range(5)},
        **{f"err line {i}": "stderr" for i in range(5)}, "err unfinished": "stderr"}
    # --tail reads backwards: the same streams
    assert _det(cluster, "t", "logs", t, "--stdtype", "stdout", "--tail", "1") == "out line 4\n"

    # an older run's log, without the index: every line still there, none with a stream
    logs = cluster.data_dir / "trials" / t / "logs.txt"
    index = logs.with_name("logs.txt.streams")
    assert index.stat().st_size > 0
    index.rename(index.with_name("streams.moved"))
    try:
        assert _det(cluster, "t", "logs", t, "--stdtype", "stderr") == ""
        old = [json.loads(line) for line in _det(cluster, "t", "logs", t, "--json").splitlines()]
        assert len(old) == len(records) and {rec["stdtype"] for rec in old} == {None}
    finally:
        index.with_name("streams.moved").rename(index)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
