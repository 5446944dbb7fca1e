"""Metric reports per second that the master accepts on loopback, with latency percentiles.

Starts a real master (``det master up`` in a temporary directory), creates one
experiment whose trial just sleeps, then N client threads (default 8), each with its
own keep-alive httpx client, POST metric reports for that trial as fast as the
master answers, for a fixed time. Prints reports/s and p50/p99 latency.

    .venv/bin/python scripts/bench_master_metrics.py [--clients 8] [--seconds 10]

Target (issue 4): >= 500 reports/s with p99 < 50 ms. Exit status 1 if missed.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

import httpx

DET = Path(sys.executable).with_name("det")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _archive() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("README")
        tar.addfile(info, io.BytesIO(b""))
    return buf.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--min-rate", type=float, default=500.0)
    parser.add_argument("--max-p99-ms", type=float, default=50.0)
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="bench-master-"))
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "HOME": str(root), "DET_MASTER": url}
    subprocess.run([str(DET), "master", "up", "--data-dir", str(root / "m"), "--port", str(port),
                    "--slots", "1"], env=env, check=True, capture_output=True)
    try:
        token = json.loads((root / ".det" / "credentials.json").read_text())[url]
        from det_sdk.client import MasterClient

        client = MasterClient(url, token)
        exp = client.create_experiment({"entrypoint_script": "sleep 600"}, _archive())
        trial_id = client.experiment(exp)["trials"][0]["id"]

        latencies: list[list[float]] = [[] for _ in range(args.clients)]
        stop = time.perf_counter() + args.seconds

        def worker(i: int) -> None:
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"},
                              timeout=30) as http:
                step = i * 10_000_000
                while time.perf_counter() < stop:
                    step += 1
                    body = {"group": "training", "steps_completed": step, "epoch": 0,
                            "metrics": {"loss": 0.5, "accuracy": 0.9}}
                    t0 = time.perf_counter()
                    r = http.post(f"/api/v1/trials/{trial_id}/metrics", json=body)
                    latencies[i].append(time.perf_counter() - t0)
                    r.raise_for_status()

        t0 = time.perf_counter()
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        all_lat = sorted(x for lat in latencies for x in lat)
        n = len(all_lat)
        rate = n / elapsed
        p50 = all_lat[n // 2] * 1000
        p99 = all_lat[min(n - 1, int(n * 0.99))] * 1000
        stored = len(client.trial_metrics(trial_id))
        print(f"clients={args.clients} reports={n} stored={stored} seconds={elapsed:.1f}")
        print(f"reports/s={rate:.0f}  p50={p50:.1f} ms  p99={p99:.1f} ms  "
              f"(target >= {args.min_rate:.0f}/s, p99 < {args.max_p99_ms:.0f} ms)")
        assert stored == n, "every report stored once"
        client.kill_experiment(exp)
        return 0 if rate >= args.min_rate and p99 < args.max_p99_ms else 1
    finally:
        subprocess.run([str(DET), "master", "down", "--data-dir", str(root / "m")], env=env,
                       capture_output=True)


if __name__ == "__main__":
    sys.exit(main())
