"""A master of a benchmark's own, in a temporary directory, driven by the real `det` CLI.

Shared by the cluster benchmarks (``bench_cluster_fit``, ``bench_pause``,
``bench_search``). The tests have their own in ``tests/cluster_harness.py``.

>>> m = BenchMaster(Path(tempfile.mkdtemp()), slots=2)  # doctest: +SKIP
>>> m.up(); exp = m.det_json("experiment", "create", "c.yaml", "model/"); m.down()
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

DET = Path(sys.executable).with_name("det")


class BenchMaster:
    """A master under ``root`` (its data in ``root/master``, HOME and credentials in
    ``root/home``) on a free port of 127.0.0.1."""

    def __init__(self, root: Path, slots: int) -> None:
        self.root = root
        self.data_dir = root / "master"
        self.slots = slots
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "HOME": str(root / "home"), "DET_MASTER": self.url,
                    "TF_CPP_MIN_LOG_LEVEL": "2"}
        for var in ("DET_RESUME", "DET_CONFIG", "DET_ALLOCATION_ID", "DET_USER_TOKEN"):
            self.env.pop(var, None)

    def det(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """Run ``det ARGS`` against this master."""
        return subprocess.run([str(DET), *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout, cwd=self.root)

    def det_json(self, *args: str) -> Any:
        """``det ARGS --json``, parsed; a failure raises with det's message."""
        out = self.det(*args, "--json")
        if out.returncode != 0:
            raise RuntimeError(f"det {' '.join(args)}: {out.stdout[-2000:]}{out.stderr.strip()}")
        return json.loads(out.stdout)

    @property
    def token(self) -> str:
        """The user token `det master up` saved for the CLI."""
        creds = json.loads((self.root / "home" / ".det" / "credentials.json").read_text())
        return creds[self.url]

    def up(self) -> None:
        out = self.det("master", "up", "--data-dir", str(self.data_dir), "--port",
                       str(self.port), "--slots", str(self.slots))
        if out.returncode != 0:
            raise RuntimeError(f"det master up: {out.stderr.strip()}")

    def down(self) -> None:
        """Stop the master, then any trial process group it left running."""
        self.det("master", "down", "--data-dir", str(self.data_dir))
        db = self.data_dir / "master.db"
        if not db.exists():
            return
        with contextlib.closing(sqlite3.connect(db)) as conn:
            pids = [pid for (pid,) in conn.execute(
                "SELECT pid FROM allocations WHERE state = 'RUNNING'")]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError, TypeError):
                os.killpg(pid, 9)
