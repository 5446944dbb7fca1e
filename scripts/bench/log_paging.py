"""Benchmark: 1 GB of a trial's log paged and filtered through the real route at bounded
memory (issue 60: "1 GB of log still paged at bounded memory").

Starts a real master (``det master up`` in a temporary directory), runs one tiny trial,
then puts a generated log of ``--size-mb`` (default 1,024) in its ``logs.txt``, as a
one-process task's log with its stream index (``logs.txt.streams``, a run of stderr
every 4 MiB; det_sdk.log_streams): INFO lines in det.LOG_FORMAT, one WARNING line in
1,000, and one needle line near the end. Then, through ``GET
/api/v1/trials/{id}/logs/records`` (what ``det trial logs`` pages with), each pass:

- ``search``: ``search_text`` of the needle, paged from the start to the end;
- ``level``: ``levels=LOG_LEVEL_WARNING``, paged from the start to the end;
- ``stderr``: ``stdtypes=stderr`` (each line's stream from the index), the first
  ``--stream-mb`` MB paged;
- ``plain``: no filter, the first ``--plain-mb`` MB paged 1,000 records at a time;
- ``tail``: ``order=desc&limit=100`` (``det trial logs --tail 100``), once.

It prints each pass's requests, records, bytes scanned, wall time and MB/s, and the
master's resident memory: at start, the most any pass left it at (VmRSS sampled every
50 ms), and its peak (VmHWM) at the end. Exit status 1 when the master's peak grew by
more than ``--max-growth-mb`` (default 200) over its start: a log that is not paged
(read whole) would add its size.

    .venv/bin/python scripts/bench/log_paging.py [--size-mb 1024] [--plain-mb 16]
        [--stream-mb 16] [--max-growth-mb 200]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: harness/
from det_sdk.log_streams import STDERR, STDOUT, StreamIndexWriter, streams_path
from harness.master import Cluster, create, wait_for_experiment

MB = 1 << 20
NEEDLE = "the needle-of-the-benchmark"


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def generate(path: Path, size: int) -> int:
    """A log of about ``size`` bytes at ``path`` with its stream index; its lines."""
    lines = []
    for i in range(1000):
        if i == 500:
            lines.append(f"WARNING: [4242] train: step {i} loss is high\n")
        else:
            lines.append(f"INFO: [4242] train: step {i} loss {1.0 / (i + 1):.6f} "
                         f"lr 0.001 samples/s 1234.5\n")
    block = "".join(lines).encode()
    count = 0
    with open(path, "wb") as f:
        index = StreamIndexWriter(streams_path(path), f.fileno())
        written = 0
        while written < size:
            if written + len(block) >= size - 4 * MB and written < size - 4 * MB:
                chunk = f"ERROR: {NEEDLE}\n".encode()
                index.before_write(STDERR)
                f.write(chunk)
                f.flush()
                index.after_write(len(chunk))
                written += len(chunk)
                count += 1
            stream = STDERR if (written // (4 * MB)) % 2 else STDOUT
            index.before_write(stream)
            f.write(block)
            f.flush()
            index.after_write(len(block))
            written += len(block)
            count += 1000
        index.close()
    return count


class RssWatch:
    """The master's VmRSS sampled every 50 ms on a thread: the most it reached."""

    def __init__(self, pid: int) -> None:
        self.pid, self.most = pid, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.most = max(self.most, _status_kb(self.pid, "VmRSS"))

    def __enter__(self) -> RssWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def page_through(http: Any, trial: int, params: dict[str, Any], until: int | None
                 ) -> dict[str, float]:
    """Page forward from byte 0 until ``done`` (or past byte ``until``)."""
    offset, requests, records, scanned = 0, 0, 0, 0
    began = time.perf_counter()
    while True:
        r = http.get(f"/api/v1/trials/{trial}/logs/records",
                     params={**params, "offset": offset})
        r.raise_for_status()
        page = r.json()
        requests += 1
        records += len(page["records"])
        scanned += page["scanned"]
        offset = page["cursor"]
        if page["done"] or (until is not None and offset >= until):
            break
    wall = time.perf_counter() - began
    # "paged": how far the cursor went (the log covered); "scanned": the bytes the
    # requests read (a page of 1,000 unfiltered records still reads SCAN_BYTES)
    return {"requests": requests, "records": records, "scanned_mb": scanned / MB,
            "paged_mb": offset / MB, "wall_s": wall,
            "mb_per_s": offset / MB / wall if wall else 0.0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--plain-mb", type=int, default=16)
    parser.add_argument("--stream-mb", type=int, default=16)
    parser.add_argument("--max-growth-mb", type=int, default=200)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="det-log-bench-") as tmp:
        cluster = Cluster(Path(tmp))
        cluster.up()
        try:
            return _run(cluster, Path(tmp), args)
        finally:
            cluster.stop()


def _run(cluster: Cluster, tmp: Path, args: argparse.Namespace) -> int:
    model = tmp / "model"
    model.mkdir()
    (model / "train.py").write_text(textwrap.dedent("""
        import det_sdk as det
        with det.core.init() as core_context:
            core_context.train.report_training_metrics(steps_completed=1,
                                                       metrics={"loss": 1.0})
    """))
    config = tmp / "exp.yaml"
    config.write_text(yaml.safe_dump({
        "name": "log-bench", "entrypoint": "python3 train.py", "max_restarts": 0,
        "searcher": {"name": "single", "metric": "loss", "max_length": 1}}))
    exp = create(cluster, config, model)
    info = wait_for_experiment(cluster, exp, "the trial", timeout=300)
    trial = int(info["trials"][0]["id"])
    log = cluster.data_dir / "trials" / str(trial) / "logs.txt"
    for side in (log.with_name("logs.txt.times"), streams_path(log)):
        side.unlink(missing_ok=True)
    began = time.perf_counter()
    lines = generate(log, args.size_mb * MB)
    size = log.stat().st_size
    print(f"generated {size / MB:,.0f} MB, {lines:,} lines, stream index "
          f"{streams_path(log).stat().st_size:,} bytes, in {time.perf_counter() - began:.1f} s")

    pid = int((cluster.data_dir / "master.pid").read_text().strip())
    start_kb = _status_kb(pid, "VmRSS")
    print(f"master pid {pid}: VmRSS at start {start_kb / 1024:.0f} MB")
    passes = [
        ("search", {"search_text": NEEDLE, "limit": 1000}, None),
        ("level", {"levels": "LOG_LEVEL_WARNING", "limit": 1000}, None),
        ("stderr", {"stdtypes": "stderr", "limit": 1000}, args.stream_mb * MB),
        ("plain", {"limit": 1000}, args.plain_mb * MB),
    ]
    most = start_kb
    with cluster.http() as http:
        for name, params, until in passes:
            with RssWatch(pid) as watch:
                got = page_through(http, trial, params, until)
            most = max(most, watch.most)
            print(f"{name:7s} {got['requests']:6.0f} requests {got['records']:9,.0f} records "
                  f"{got['paged_mb']:7,.0f} MB paged ({got['scanned_mb']:7,.0f} MB read) "
                  f"{got['wall_s']:7.1f} s {got['mb_per_s']:6.1f} MB/s  VmRSS at most "
                  f"{watch.most / 1024:.0f} MB")
        with RssWatch(pid) as watch:
            t0 = time.perf_counter()
            r = http.get(f"/api/v1/trials/{trial}/logs/records",
                         params={"order": "desc", "limit": 100})
            r.raise_for_status()
            wall = time.perf_counter() - t0
        most = max(most, watch.most)
        print(f"tail    1 request {len(r.json()['records'])} records "
              f"{r.json()['scanned'] / MB:.1f} MB scanned {wall * 1000:.0f} ms")
    peak_kb = _status_kb(pid, "VmHWM")
    growth = (peak_kb - start_kb) / 1024
    print(f"master VmRSS: start {start_kb / 1024:.0f} MB, most during the passes "
          f"{most / 1024:.0f} MB, peak (VmHWM) {peak_kb / 1024:.0f} MB: +{growth:.0f} MB "
          f"for a {size / MB:,.0f} MB log")
    if growth > args.max_growth_mb:
        print(f"FAIL: the master grew by more than {args.max_growth_mb} MB", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
