"""Issue 46: the master's disk work (keeping an ended task's files, deleting checkpoints)
is never served half done and never stalls its answers.

In-process over the real app (FastAPI's TestClient: one event loop in a thread, as
uvicorn's) and a real master's SQLite store, never started: the tests play the
launcher's part (an allocation, its exit) on threads, as the launcher's watcher threads
do. A blocked event loop or a lock held over disk work shows here as it does under
uvicorn: every request of the client goes through the one loop.

The answers' latency while the work runs: tests/e2e/test_master_disk_latency.py (it
starts a heartbeat process).
"""

from __future__ import annotations

import base64
import os
import threading
import time
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from det_sdk.config import parse_job_config
from det_sdk.master.app import create_app
from det_sdk.master.archive import pack
from det_sdk.master.core import Master
from det_sdk.master.lifecycle import JobEvent
from det_sdk.master.task_files import mark_unpacked
from det_sdk.storage import OWNER_FILE

# Stack-neutral: this module tests the master; no Keras.
pytestmark = pytest.mark.stack_neutral



class Cluster:
    """A master with its app, and the launcher's part played by hand."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.master = Master(root / "m", slots=4, url="http://127.0.0.1:1")
        self.http = TestClient(create_app(self.master))
        self.headers = {"Authorization": f"Bearer {self.master.user_token()}"}
        self.n = 0

    def get(self, path: str, headers: dict[str, str] | None = None) -> Any:
        return self.http.get(path, headers=headers or self.headers)

    def post(self, path: str, token: str | None = None, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {token}"} if token else self.headers
        return self.http.post(path, headers=headers, **kwargs)

    def _alloc(self, task_type: str, trial_id: int | None, job_id: int | None
               ) -> dict[str, Any]:
        self.n += 1
        alloc = {"id": f"{task_type.lower()}-{self.n}", "task_type": task_type,
                 "trial_id": trial_id, "job_id": job_id, "token": f"token-{self.n}",
                 "state": "RUNNING", "pid": None, "slots": 1, "workdir": None,
                 "started": time.time()}
        self.master.store.create_allocation(alloc)
        return alloc

    def job_that_wrote(self, files: int) -> tuple[int, dict[str, Any]]:
        """A running job whose working directory holds ``files`` files it wrote."""
        cfg = parse_job_config({"entrypoint_script": "true"}).model_dump(mode="json")
        archive = self.root / f"upload-{self.n}.tar.gz"
        archive.write_bytes(b"")
        job_id = self.master.store.create_job(cfg, str(archive))
        self.master.lifecycle.job_event(job_id, JobEvent.SCHEDULED)
        work = self.master.tasks_dir / "jobs" / str(job_id) / "workdir"
        (work / "out").mkdir(parents=True)
        mark_unpacked(work)
        time.sleep(0.01)
        for i in range(files - 1):  # empty: the cost is in the count (metadata)
            os.close(os.open(work / "out" / f"{i:05d}.txt", os.O_CREAT | os.O_WRONLY, 0o644))
        (work / "predictions.npy").write_bytes(b"\x93NUMPY" + b"\0" * 100)
        return job_id, self._alloc("GENERIC", None, job_id)

    def running_trial(self) -> tuple[int, dict[str, Any]]:
        """A running trial of an experiment that keeps its latest checkpoint only."""
        (self.root / "model").mkdir(exist_ok=True)
        (self.root / "model" / "train.py").write_text("print('hi')\n")
        config = {"entrypoint": "python3 train.py",
                  "searcher": {"name": "single", "metric": "val_loss",
                               "max_length": {"epochs": 3}},
                  "checkpoint_storage": {"save_trial_latest": 1, "save_trial_best": 0,
                                         "host_path": str(self.root / "storage")}}
        exp = self.master.create_experiment(
            config, base64.b64encode(pack(self.root / "model")).decode())
        trial = self.master.store.trials(exp)[0]["id"]
        self.master.store.update_trial(trial, state="RUNNING")
        return trial, self._alloc("TRIAL", trial, None)

    def checkpoint(self, trial: int, alloc: dict[str, Any], files: int) -> str:
        """A checkpoint directory of ``files`` files, written by ``alloc``'s task."""
        uuid = str(uuidlib.uuid4())
        path = self.root / "storage" / uuid
        path.mkdir(parents=True)
        (path / OWNER_FILE).write_text(
            f'{{"allocation_id": "{alloc["id"]}", "trial_id": {trial}}}')
        for i in range(files):
            os.close(os.open(path / f"w{i:05d}", os.O_CREAT | os.O_WRONLY, 0o644))
        return uuid

    def report_checkpoint(self, trial: int, alloc: dict[str, Any], uuid: str) -> Any:
        return self.post("/api/v1/checkpoints", token=alloc["token"], json={
            "trial_id": trial, "uuid": uuid, "steps_completed": 1, "epoch": 1,
            "metrics": {"val_loss": 1.0}})

    def exit(self, alloc: dict[str, Any], code: int) -> None:
        """What the launcher's watcher thread does when the process ends."""
        self.master.store.update_allocation(alloc["id"], state="EXITED", exit_code=code)
        self.master.scheduler.on_exit(self.master.store.allocation(alloc["id"]), code)


@pytest.fixture(name="cluster")
def cluster_fixture(tmp_path: Path) -> Iterator[Cluster]:
    """A master and its app for each test; its disk work waited for after."""
    c = Cluster(tmp_path)
    with c.http:
        yield c
    c.master.wait_disk_work(60)


def _names(tar_gz: bytes) -> set[str]:
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(tar_gz), mode="r:gz") as tar:
        return {m.name for m in tar.getmembers() if m.isfile()}


def test_an_ended_task_s_files_are_served_whole_or_not_at_all(cluster: Cluster) -> None:
    job_id, alloc = cluster.job_that_wrote(500)
    path = f"/api/v1/jobs/{job_id}/files"
    assert cluster.get(path).status_code == 404  # running: kept when it ends
    ender = threading.Thread(target=cluster.exit, args=(alloc, 0))
    ender.start()
    answers = []
    while True:  # asked as fast as the client can, while the job ends and its files go
        r = cluster.get(path)
        answers.append(r.status_code)
        if r.status_code == 200:
            assert "content-length" not in r.headers  # streamed as packed, no whole tar
            names = _names(r.content)
            assert len(names) == 500 and "./predictions.npy" in names  # never a part
            break
        assert r.status_code in (404, 409), r.text
        if r.status_code == 409:
            assert "are being kept: ask again" in r.json()["detail"]
        else:  # before the exit is recorded the job runs; never "wrote none" after it
            assert "has not ended" in r.json()["detail"], r.json()
        time.sleep(0.005)  # leave the copy some of the interpreter
    ender.join()
    assert cluster.master.job(job_id)["state"] == "COMPLETED"
    assert not (cluster.master.tasks_dir / "jobs" / str(job_id) / "workdir").exists()


def test_an_ended_task_s_files_wait_for_the_disk_work_then_come_whole(cluster: Cluster
                                                                       ) -> None:
    job_id, alloc = cluster.job_that_wrote(10)
    held = threading.Event()
    cluster.master.disk_work.submit("a slow copy before it", held.wait, 30)
    cluster.exit(alloc, 0)
    assert cluster.master.job(job_id)["state"] == "COMPLETED"
    r = cluster.get(f"/api/v1/jobs/{job_id}/files")
    assert r.status_code == 409 and "being kept" in r.json()["detail"]
    held.set()
    assert cluster.master.wait_disk_work(30)
    assert len(_names(cluster.get(f"/api/v1/jobs/{job_id}/files").content)) == 10
    # a trial that wrote nothing: 404 once ended, with the reason
    assert cluster.get("/api/v1/trials/1/files").status_code == 404


def test_a_master_restarted_mid_copy_keeps_the_files_again_whole(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    job_id, alloc = c.job_that_wrote(20)
    held = threading.Event()
    c.master.disk_work.submit("the copy a crash interrupts", held.wait, 30)
    c.exit(alloc, 0)
    files = c.master.files_path("jobs", job_id)
    files.mkdir(parents=True)
    (files / "predictions.npy").write_bytes(b"half")  # what the crashed copy had done
    again = Master(tmp_path / "m", slots=4, url="http://127.0.0.1:1")
    again.start()
    try:
        assert again.wait_disk_work(30)
        assert again.files_kept("jobs", job_id)
        assert len(list((files / "out").iterdir())) == 19
        assert (files / "predictions.npy").stat().st_size == 106
    finally:
        again.stop()
        held.set()
