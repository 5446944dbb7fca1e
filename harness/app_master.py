"""A master in the test's own process: the real app (FastAPI's TestClient) over a real
master's SQLite store, and the ``det`` CLI's client pointed at it. No process is started,
so integration tests use it (harness/master.py's ``Cluster`` is the one that starts a
``det master up``).

    >>> import tempfile
    >>> from pathlib import Path
    >>> with AppMaster(Path(tempfile.mkdtemp())) as m:
    ...     m.http.get("/api/v1/master").status_code
    200
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from det_sdk.client import MasterClient
from det_sdk.master.app import create_app
from det_sdk.master.archive import pack
from det_sdk.master.core import Master


class AppMaster:
    """One master under ``root`` (its data in ``root/m``, checkpoints in ``root/storage``)
    with a user's token; ``http`` answers the master's API in this process."""

    def __init__(self, root: Path, slots: int = 1) -> None:
        self.root = root
        # a URL that nothing answers: the app is reached through ``http``, never a socket
        self.master = Master(root / "m", slots=slots, url="http://127.0.0.1:1")
        self.token = self.master.user_token()
        self.http = TestClient(create_app(self.master),
                               headers={"Authorization": f"Bearer {self.token}"})

    def __enter__(self) -> AppMaster:
        self._entered = self.http  # a test may point ``http`` at another master meanwhile
        self._entered.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._entered.__exit__(*exc)

    def client(self) -> MasterClient:
        """The CLI's client, its requests answered by the app in this process."""
        c = MasterClient("http://testserver", self.token)
        c._http = self.http  # the same httpx API
        return c

    def experiment(self, searcher: dict[str, Any] | None = None,
                   hyperparameters: dict[str, Any] | None = None) -> int:
        """Create an experiment of a one-line model (no trial is run: no agent here)."""
        (self.root / "model").mkdir(exist_ok=True)
        (self.root / "model" / "train.py").write_text("print('hi')\n")
        config = {"entrypoint": "python3 train.py",
                  "hyperparameters": hyperparameters or {},
                  "searcher": searcher or {"name": "single", "metric": "val_loss",
                                           "max_length": {"epochs": 1}},
                  "checkpoint_storage": {"host_path": str(self.root / "storage")}}
        return self.master.create_experiment(
            config, base64.b64encode(pack(self.root / "model")).decode())
