"""Benchmark: the web UI at scale, in headless Chromium.

Seeds a master's store with 1,000 experiments (4 trials each) and one trial with
100,000 training metric points (2 metrics) plus validation every 1,000 batches, starts
the real master on it, and measures in Chromium (a fresh browser context each time:
nothing cached):

- the time from navigation to the trial page showing its charts, and to the experiment
  list showing all 1,000 rows (median of ``--repeat`` loads);
- what each page downloads (bytes over the wire, gzipped; and the files' sizes);
- the server side of the metrics call: downsampled (the default) and full.

Seeding goes through the store (a real training run would take hours to report
100,000 points); the page tests use real experiments.

    python scripts/bench/bench_ui.py [--points 100000] [--experiments 1000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: harness/

from det_sdk.config import parse_experiment_config
from det_sdk.master.store import Store
from harness.browser import missing_reason, open_browser, signed_in_context
from harness.master import Cluster

CONFIG = {
    "name": "bench", "entrypoint_script": "python3 train.py",
    "hyperparameters": {"learning_rate": {"type": "log", "minval": -4, "maxval": -1},
                        "global_batch_size": 32, "dense": {"type": "int", "minval": 8,
                                                           "maxval": 64}},
    "searcher": {"name": "random", "metric": "val_loss", "max_trials": 4,
                 "max_length": {"batches": 100000}},
}


def seed(db: Path, experiments: int, points: int) -> tuple[int, int]:
    """Fill a store; returns the ids of two trials with ``points`` training points each."""
    store = Store(db)
    stored = parse_experiment_config(CONFIG).model_dump(mode="json", exclude_none=False)
    now = time.time()
    for e in range(experiments):
        trials = [{"hparams": {"learning_rate": 10 ** (-4 + 3 * ((e * 4 + i) % 7) / 6),
                               "global_batch_size": 32, "dense": 8 + (e + i) % 57},
                   "seed": i, "bracket": 0, "target": None} for i in range(4)]
        exp_id = store.create_experiment_with_trials({**stored, "name": f"bench-{e}"},
                                                     "/nonexistent.tgz", trials)
        with store.tx() as tx:
            tx.execute("UPDATE experiments SET state = 'COMPLETED', created = ? WHERE id = ?",
                       (now - (experiments - e) * 60, exp_id))
            tx.execute("UPDATE trials SET state = 'COMPLETED', progress = 1,"
                       " best_metric = 0.1 + (id % 13) / 10 WHERE experiment_id = ?", (exp_id,))
    # the same long series in two trials: one for the API timings, one for the pages, so
    # that each has its first (cold cache) view measured
    ids = [t["id"] for t in store.trials(experiments)[:2]]
    for trial_id in ids:
        with store.tx() as tx:
            tx.executemany(
                "INSERT OR REPLACE INTO metrics VALUES (?, 'training', ?, ?, ?, ?)",
                ((trial_id, s, s // 1000, json.dumps({
                    "loss": 2.3 * math.exp(-s / 20000) + 0.05 * math.sin(s / 50),
                    "accuracy": 1 - math.exp(-s / 15000)}), now - points + s)
                 for s in range(1, points + 1)))
            tx.executemany(
                "INSERT OR REPLACE INTO metrics VALUES (?, 'validation', ?, ?, ?, ?)",
                ((trial_id, s, s // 1000, json.dumps({
                    "val_loss": 2.4 * math.exp(-s / 20000),
                    "val_accuracy": 1 - math.exp(-s / 14000)}), now - points + s)
                 for s in range(1000, points + 1, 1000)))
            tx.execute("UPDATE trials SET steps_completed = ?, epoch = ? WHERE id = ?",
                       (points, points // 1000, trial_id))
    return ids[0], ids[1]


def page_load(browser: Any, url: str, token: str, hash_: str,
              marks: list[str]) -> dict[str, Any]:
    """Load ``/ui/{hash_}`` in a fresh context (nothing cached). For each of ``marks``
    (``det:NAME`` marks the page sets once a frame showing NAME was painted), the ms
    since navigation start by the page's own clock; and the bytes downloaded."""
    context = signed_in_context(browser, url, token)
    page = context.new_page()
    page.goto(f"{url}/ui/{hash_}")
    ms = []
    for mark in marks:
        page.wait_for_function(f"() => performance.getEntriesByName('det:{mark}').length",
                               timeout=30000)
        ms.append(page.evaluate(f"performance.getEntriesByName('det:{mark}')[0].startTime"))
    sizes = page.evaluate("""() => {
        const all = [performance.getEntriesByType('navigation')[0],
                     ...performance.getEntriesByType('resource')];
        return {wire: all.reduce((a, e) => a + e.transferSize, 0),
                body: all.reduce((a, e) => a + e.decodedBodySize, 0),
                requests: all.length};
    }""")
    context.close()
    return {"ms": ms, **sizes}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--experiments", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    reason = missing_reason()
    if reason:
        print(f"bench_ui: cannot run: {reason}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "master"
        data_dir.mkdir()
        t = time.perf_counter()
        trial_id, page_trial = seed(data_dir / "master.db", args.experiments, args.points)
        print(f"seeded {args.experiments} experiments, and trials {trial_id} and {page_trial} "
              f"with {args.points} training points each, in {time.perf_counter() - t:.1f} s")
        master = Cluster(Path(tmp), slots=1)  # its data_dir is the one seeded above
        master.up()
        url, token = master.url, master.token
        try:
            api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}",
                                                      "Accept-Encoding": "gzip"}, timeout=60)
            for label, query in (("downsampled (default)", ""), ("full", "?max_points=0")):
                times, size = [], 0
                for i in range(args.repeat + 1):
                    t = time.perf_counter()
                    r = api.get(f"/ui/api/trials/{trial_id}/metrics{query}")
                    r.raise_for_status()
                    if i:  # the first call also parses the rows into the series cache
                        times.append((time.perf_counter() - t) * 1000)
                    else:
                        first = (time.perf_counter() - t) * 1000
                    size = len(r.content)
                pts = sum(len(g["steps"]) for g in r.json()["groups"].values())
                print(f"metrics API, {label}: {pts} points, {size / 1024:.0f} KiB JSON; "
                      f"first call {first:.0f} ms, then median "
                      f"{statistics.median(times):.0f} ms")
            with open_browser() as browser:
                trial = ["trial-charts"]
                listing = ["list-first-screen", "list-all-rows"]
                for label, hash_, milestones, names in (
                        (f"trial page, {args.points} points", f"#/trials/{page_trial}", trial,
                         ["charts shown"]),
                        (f"experiment list, {args.experiments} rows", "#/experiments",
                         listing, ["first screen", f"all {args.experiments} rows"])):
                    cold = page_load(browser, url, token, hash_, milestones)
                    print(f"{label}: first view after the master started (its caches cold): "
                          + ", ".join(f"{n} in {ms:.0f} ms" for n, ms in zip(names, cold["ms"])))
                    runs = [page_load(browser, url, token, hash_, milestones)
                            for _ in range(args.repeat)]
                    for i, name in enumerate(names):
                        ms = [r["ms"][i] for r in runs]
                        print(f"{label}: {name} in {statistics.median(ms):.0f} ms (median of "
                              f"{args.repeat} loads in a fresh browser context; min "
                              f"{min(ms):.0f}, max {max(ms):.0f})")
                    r = runs[-1]
                    print(f"{label}: downloads {r['wire'] / 1024:.0f} KiB over the wire "
                          f"({r['body'] / 1024:.0f} KiB unpacked) in {r['requests']} requests")
            print("(times: from navigation start to the frame that shows it, by the page's "
                  "clock; medians with the server's caches warm, as for any later visit)")
        finally:
            master.stop()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
