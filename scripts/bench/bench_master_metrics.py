"""Metric reports per second that the master accepts on loopback, with latency percentiles.

Starts a real master (``det master up`` in a temporary directory), creates one
experiment whose trial just sleeps, then N clients (default 8), each with its own
keep-alive httpx client, POST metric reports for that trial as fast as the master
answers, for a fixed time. The clients are threads spread over ``--processes`` client
processes (default 2): one Python process of 8 threads was the bottleneck, not the
master (1,773-1,863/s with one process, 2,279/s with two). Prints reports/s and p50/p99
latency, and checks that every report was stored once.

    .venv/bin/python scripts/bench/bench_master_metrics.py [--clients 8] [--processes 2] \
        [--seconds 10]

Target (issue 26): >= 2,000 reports/s with p99 < 20 ms at 8 clients. Exit status 1 if
missed.
"""

from __future__ import annotations

import argparse
import io
import multiprocessing
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: harness/
from harness.master import Cluster


def _archive() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("README")
        tar.addfile(info, io.BytesIO(b""))
    return buf.getvalue()


def _client_process(url: str, token: str, trial_id: int, first: int, count: int,
                    start: float, stop: float) -> list[list[float]]:
    """``count`` client threads (numbered from ``first``) posting reports from ``start``
    to ``stop``; each thread's latencies in seconds."""
    latencies: list[list[float]] = [[] for _ in range(count)]

    def worker(i: int) -> None:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"},
                          timeout=30) as http:
            step = (first + i) * 10_000_000
            time.sleep(max(0.0, start - time.perf_counter()))
            while time.perf_counter() < stop:
                step += 1
                body = {"group": "training", "steps_completed": step, "epoch": 0,
                        "metrics": {"loss": 0.5, "accuracy": 0.9}}
                t0 = time.perf_counter()
                r = http.post(f"/api/v1/trials/{trial_id}/metrics", json=body)
                latencies[i].append(time.perf_counter() - t0)
                r.raise_for_status()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--min-rate", type=float, default=2000.0)
    parser.add_argument("--max-p99-ms", type=float, default=20.0)
    args = parser.parse_args()

    master = Cluster(Path(tempfile.mkdtemp(prefix="bench-master-")), slots=1)
    master.up()
    url, token = master.url, master.token
    try:
        from det_sdk.client import MasterClient

        client = MasterClient(url, token)
        exp = client.create_experiment({"entrypoint_script": "sleep 600"}, _archive())
        trial_id = client.experiment(exp)["trials"][0]["id"]

        # every client process starts its threads at the same moment and stops at the same
        # deadline (both on this machine's monotonic clock)
        start = time.perf_counter() + 2.0
        stop = start + args.seconds
        share = [args.clients // args.processes + (p < args.clients % args.processes)
                 for p in range(args.processes)]
        first = [sum(share[:p]) for p in range(args.processes)]
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(args.processes) as pool:
            parts = pool.starmap(_client_process, [
                (url, token, trial_id, first[p], share[p], start, stop)
                for p in range(args.processes)])
        latencies = [lat for part in parts for lat in part]
        elapsed = args.seconds
        all_lat = sorted(x for lat in latencies for x in lat)
        n = len(all_lat)
        rate = n / elapsed
        p50 = all_lat[n // 2] * 1000
        p99 = all_lat[min(n - 1, int(n * 0.99))] * 1000
        stored = len(client.trial_metrics(trial_id))
        print(f"clients={args.clients} in {args.processes} processes reports={n} "
              f"stored={stored} seconds={elapsed:.1f}")
        print(f"reports/s={rate:.0f}  p50={p50:.1f} ms  p99={p99:.1f} ms  "
              f"(target >= {args.min_rate:.0f}/s, p99 < {args.max_p99_ms:.0f} ms)")
        assert stored == n, "every report stored once"
        client.kill_experiment(exp)
        return 0 if rate >= args.min_rate and p99 < args.max_p99_ms else 1
    finally:
        master.stop()


if __name__ == "__main__":
    sys.exit(main())
