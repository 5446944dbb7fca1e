"""The master's experiment list at 10, 1,000 and 10,000 experiments, side by side (issue 15).

One real master per size (`det master up`, each on its own port and data directory).
Each database is filled before its master starts, in bulk straight through SQLite
(``harness/history.py``: finished experiments of 3 trials, each trial
with a validation report and a checkpoint record). That is not the master's API, which
would create and run every trial; the rows are what the master itself writes.

Then rounds: in each, one `GET /api/v1/experiments` (the first page, the API's default
limit of 100 summaries) to every master, in an order that rotates from round to round so
that no size always goes first; the time from sending the request to its last byte, on
a kept-alive connection. A sample is clean if the answer is 200 with the page's 100 rows
(or all 10) and the right total. Last, `det experiment list` (a fresh process each time:
the newest 20 and a footer) against every master, alternating, and one
`det experiment list --all` at the largest size.

Gate: median first-page latency at 10,000 / at 10 <= 2, the 10,000 first page's p95 under
50 ms, and at least 90% of the rounds clean at every size; else MISSED (exit 1).

    .venv/bin/python scripts/bench/bench_list.py [--rounds 300] [--cli-reps 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: harness/
from harness.history import fill_history
from harness.master import Cluster

SIZES = (10, 1_000, 10_000)
PAGE = 100  # det_sdk.api.DEFAULT_PAGE_LIMIT: what a GET without `limit` answers


def _p95(xs: list[float]) -> float:
    return sorted(xs)[max(0, round(0.95 * len(xs)) - 1)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300, help="requests per size")
    parser.add_argument("--warmup", type=int, default=20, help="rounds not counted")
    parser.add_argument("--cli-reps", type=int, default=7)
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="bench-list-"))
    masters: dict[int, Cluster] = {}
    try:
        for n in SIZES:
            m = Cluster(root / str(n), slots=1)
            t0 = time.perf_counter()
            fill_history(m.data_dir / "master.db", n, trials_per_experiment=3)
            fill_s = time.perf_counter() - t0
            m.up()
            masters[n] = m
            print(f"{n:>6} experiments ({3 * n} trials, {3 * n} checkpoints): filled in "
                  f"{fill_s:.2f} s through SQLite")
        clients = {n: httpx.Client(base_url=m.url, timeout=30,
                                   headers={"Authorization": f"Bearer {m.token}"})
                   for n, m in masters.items()}
        samples: dict[int, list[float]] = {n: [] for n in SIZES}
        dirty: dict[int, int] = dict.fromkeys(SIZES, 0)
        sizes_bytes: dict[int, int] = {}
        order = list(SIZES)
        for r in range(args.warmup + args.rounds):
            order = order[1:] + order[:1]  # rotate: each size goes first a third of the time
            for n in order:
                t0 = time.perf_counter()
                resp = clients[n].get("/api/v1/experiments")
                body = resp.content  # to the last byte
                ms = (time.perf_counter() - t0) * 1000
                if r < args.warmup:
                    continue
                ok = resp.status_code == 200
                if ok:
                    page = json.loads(body)
                    ok = (page["total"] == n and len(page["experiments"]) == min(n, PAGE)
                          and page["experiments"][0]["id"] == n)
                    sizes_bytes[n] = len(body)
                if ok:
                    samples[n].append(ms)
                else:
                    dirty[n] += 1
        for c in clients.values():
            c.close()

        cli: dict[int, list[float]] = {n: [] for n in SIZES}
        for _ in range(args.cli_reps):
            for n in SIZES:
                t0 = time.perf_counter()
                out = masters[n].det("experiment", "list")
                took = time.perf_counter() - t0
                if out.returncode != 0 or (n > 20 and "of " + str(n) not in out.stdout):
                    raise RuntimeError(f"det experiment list at {n}: {out.stderr[-500:]}")
                cli[n].append(took)
        big = SIZES[-1]
        t0 = time.perf_counter()
        out = masters[big].det("experiment", "list", "--all")
        all_s = time.perf_counter() - t0
        rows_all = len(out.stdout.splitlines()) - 1
    finally:
        for m in masters.values():
            m.stop()

    print(f"\nfirst page of GET /api/v1/experiments ({PAGE} summaries), {args.rounds} rounds "
          f"after {args.warmup} of warm-up, sizes interleaved; load average "
          f"{os.getloadavg()[0]:.2f}")
    print(f"{'experiments':>11}  {'median ms':>9}  {'p95 ms':>7}  {'clean':>7}  "
          f"{'bytes':>7}  {'det experiment list s':>21}")
    med = {n: statistics.median(samples[n]) if samples[n] else float("nan") for n in SIZES}
    p95 = {n: _p95(samples[n]) if samples[n] else float("nan") for n in SIZES}
    for n in SIZES:
        print(f"{n:>11}  {med[n]:>9.2f}  {p95[n]:>7.2f}  {len(samples[n]):>3}/{args.rounds:<3}  "
              f"{sizes_bytes.get(n, 0):>7}  {statistics.median(cli[n]):>21.3f}")
    ratio = med[SIZES[-1]] / med[SIZES[0]]
    cli_ratio = statistics.median(cli[SIZES[-1]]) / statistics.median(cli[SIZES[0]])
    print(f"ratio 10,000 / 10: first page median {ratio:.2f} (target <= 2), p95 "
          f"{p95[SIZES[-1]] / p95[SIZES[0]]:.2f}; det experiment list {cli_ratio:.2f}")
    print(f"same page size (100 rows), 1,000 -> 10,000 experiments: median "
          f"{med[SIZES[-1]] / med[SIZES[1]]:.2f}x (at 10 the page holds only 10 rows)")
    print(f"det experiment list --all at {big}: {all_s:.2f} s for {rows_all} rows "
          "(follows the cursors, 1,000 a page)")
    enough = all(len(samples[n]) >= 0.9 * args.rounds for n in SIZES)
    ok = enough and ratio <= 2 and p95[SIZES[-1]] < 50
    print(json.dumps({"median_ms": med, "p95_ms": p95, "clean": {n: len(samples[n])
                      for n in SIZES}, "dirty": dirty, "page_bytes": sizes_bytes,
                      "cli_s": {n: statistics.median(cli[n]) for n in SIZES},
                      "ratio_median": round(ratio, 3), "cli_all_s": round(all_s, 3)}))
    if not enough:
        print("MISSED: fewer than 90% clean samples at some size")
    print(("OK" if ok else "MISSED") + f": 10,000/10 = {ratio:.2f} (<= 2), 10,000 first page "
          f"p95 {p95[SIZES[-1]]:.1f} ms (< 50)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
