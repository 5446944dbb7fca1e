"""A streamed ``context.predict(..., output=URL)`` into an object store (S3, GCS, Azure),
each against a real server the module starts once (SeaweedFS, fake-gcs-server,
Azurite), as tests/e2e/test_object_stores.py does. The predict is the PyTorch script
context's (no Keras: the Keras front calls the same store through the same seam,
``det_sdk.predictions.output_store``).

In process: the bucket's predictions equal a local directory's, bit for bit; a URL is
never a folder (no ``s3:`` appears, a ``Path`` of a URL is the URL); a rerun keeps every
part; a flipped byte in a part object is a ``PredictionsCorruptError`` naming the part,
and the rerun writes that part alone; the lock refuses a live holder, takes over a dead
or stale one, and a run whose lock was taken stops. In a process (S3 only: GCS and Azure
go through the same code): a kill -9 mid-stream, a second run refused while the first
lives, and the rerun writes only the missing parts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.object_servers import started
from tests.seaweedfs import ACCESS_KEY, SECRET_KEY

pytest.importorskip("obstore")
torch = pytest.importorskip("torch")
pytestmark = pytest.mark.stack_neutral  # torch and the stores: no Keras

import det_sdk  # noqa: E402
import det_sdk.pytorch as pytorch  # noqa: E402
from det_sdk.env import outside  # noqa: E402
from det_sdk.errors import StorageError  # noqa: E402
from det_sdk.predictions import (  # noqa: E402
    PredictionsBusyError,
    PredictionsCorruptError,
    StreamedPredictions,
)
from det_sdk.predictions_buckets import BucketLock, BucketPartStore, bucket_storage  # noqa: E402
from tests.support import REPO  # noqa: E402

BUCKET = "det-sdk-preds"
ROWS, BATCH = 103, 10  # 11 parts
SCRIPT = REPO / "tests" / "scripts" / "torch_predict_stream.py"


@dataclass
class Store:
    """One server: its URL scheme, a ``checkpoint_storage`` naming the bucket (whose
    credentials an output in that bucket uses), and the environment a process needs."""

    scheme: str
    storage: dict[str, Any] | None
    env: dict[str, str]

    def url(self, prefix: str) -> str:
        return f"{self.scheme}://{BUCKET}/{prefix}"


@pytest.fixture(scope="module", params=["s3", "gcs", "azure"])
def store(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    kind = request.param
    with started(kind, tmp_path_factory, BUCKET) as server:
        if kind == "s3":
            yield Store("s3", {"type": "s3", "bucket": BUCKET, "prefix": "ckpts",
                               "endpoint_url": server.endpoint_url, "access_key": ACCESS_KEY,
                               "secret_key": SECRET_KEY},
                        {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                         "AWS_ENDPOINT_URL": server.endpoint_url})
        elif kind == "gcs":
            yield Store("gs", None, {"STORAGE_EMULATOR_HOST": server.url})
        else:
            yield Store("az", {"host_path": f"az://{BUCKET}/ckpts",
                               "connection_string": server.connection_string},
                        {"AZURE_STORAGE_CONNECTION_STRING": server.connection_string})


class Rows(torch.utils.data.Dataset):
    def __init__(self) -> None:
        self.x = torch.from_numpy(np.random.default_rng(0).normal(size=(ROWS, 4))
                                  .astype("float32"))

    def __len__(self) -> int:
        return ROWS

    def __getitem__(self, i: int):
        return self.x[i], torch.zeros(1)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def _objects(store: Store, prefix: str) -> dict[str, Any]:
    client = bucket_storage(store.url(prefix), store.storage)
    return {o["path"]: o for o in client.list_objects()}


def _flip(store: Store, url: str, name: str) -> None:
    client = bucket_storage(url, store.storage)
    data = bytearray(client.get_object(name))
    data[-1] ^= 0x01  # a value's last byte: the header still parses
    client.put_object(name, bytes(data))


def test_a_bucket_holds_what_a_directory_does_verified_and_resumed(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    url = store.url("job")
    config = {"checkpoint_storage": store.storage} if store.storage else None
    model, data = _model(), Rows()
    with pytorch.init(hparams={"global_batch_size": BATCH}, config=config,
                      runs_dir=tmp_path / "runs") as ctx:
        local = ctx.predict(model, data, output=tmp_path / "local")
        out = ctx.predict(model, data, output=url + "/")
        assert isinstance(out, StreamedPredictions)
        assert (out.path, out.rows, out.parts, out.resumed) == (url, ROWS, 11, 0)
        # a Path of the URL has lost a slash ("s3:/bucket/job"): still the URL, every
        # part kept, none written again
        again = ctx.predict(model, data, output=Path(url))
        assert (again.path, again.resumed) == (url, 11)
        # a flipped byte in part 3's object: the read names it; the rerun writes it alone
        _flip(store, url, "part-000000003.npy")
        with pytest.raises(PredictionsCorruptError,
                           match=rf"part 3 \({url}/part-000000003.npy\) is damaged"):
            det_sdk.load_predictions(url, storage=store.storage)
        assert ctx.predict(model, data, output=url).resumed == 10
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(":")]  # no "s3:" folder
    names = sorted(_objects(store, "job"))
    assert names == sorted(["manifest.json", *(f"part-{i:09d}.{e}" for i in range(11)
                                              for e in ("npy", "json"))])  # lock released
    expected = det_sdk.load_predictions(local.path)
    got = det_sdk.load_predictions(url, storage=store.storage)
    assert got.dtype == expected.dtype and got.tobytes() == expected.tobytes()
    mapped = det_sdk.load_predictions(url, mmap=True, storage=store.storage)
    assert isinstance(mapped, np.memmap) and mapped.tobytes() == expected.tobytes()
    assert not Path(mapped.filename).exists()  # mapped, then unlinked: nothing left


def test_the_lock_refuses_a_live_run_and_takes_a_dead_ones(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    url = store.url("lock")
    client = bucket_storage(url, store.storage)
    fp, model = {"kind": "arrays", "rows": 2, "batch_size": 1, "digest": "x"}, {"m": 1}

    def held_by(host: str, pid: int) -> None:
        client.put_object(".predict.lock", json.dumps(
            {"host": host, "pid": pid, "token": "theirs", "time": time.time()}).encode())

    held_by("another-host", 4242)  # heartbeat fresh: live
    with pytest.raises(PredictionsBusyError, match="process 4242 on another-host"):
        BucketPartStore(url, client).begin(fp, model)
    monkeypatch.setattr(BucketLock, "STALE", 0.5)  # ... until its heartbeat is old
    time.sleep(1.5)
    first = BucketPartStore(url, client)
    first.begin(fp, model)
    first.release()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    import socket

    held_by(socket.gethostname(), int(dead.stdout))  # this host, its process gone
    monkeypatch.setattr(BucketLock, "HEARTBEAT", 0.2)
    taken = BucketPartStore(url, client)
    taken.begin(fp, model)
    taken.write_part(0, np.zeros((1, 2)))
    held_by("another-host", 4243)  # a second run took it over: this one stops
    time.sleep(1.0)
    with pytest.raises(PredictionsBusyError, match="taken over by process 4243"):
        taken.write_part(1, np.zeros((1, 2)))
    taken.release()  # leaves the other run's lock
    assert json.loads(client.get_object(".predict.lock"))["pid"] == 4243


# the same code for every store: one process run (S3, the module's server) is enough
@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_a_killed_process_resumes_writing_only_the_missing_parts(
        store: Store, tmp_path: Path) -> None:
    url, rows = store.url("killed"), 203  # 51 parts of 4 rows
    env = outside(PYTHONPATH=str(REPO), DET_RUNS_DIR=str(tmp_path / "runs"), PRED_OUT=url,
                  PRED_ROWS=str(rows), **store.env)
    proc = subprocess.Popen([sys.executable, str(SCRIPT)], cwd=tmp_path, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**env, "PRED_SLEEP": "0.02"})
    deadline = time.monotonic() + 120

    def sidecars() -> list[str]:
        return [p for p in _objects(store, "killed") if p.endswith(".json") and
                p.startswith("part-")]

    try:
        while len(sidecars()) < 10:
            assert proc.poll() is None, f"ended before the kill: {proc.stderr.read()[-3000:]}"
            assert time.monotonic() < deadline, "no progress"
            time.sleep(0.05)
        # a second run while the first lives: refused, nothing of the first touched
        with pytest.raises(PredictionsBusyError, match=f"process {proc.pid} on"):
            BucketPartStore.open(url, store.storage).begin({"kind": "other"}, {})
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        proc.stderr.close()
    kept = len(sidecars())
    assert 10 <= kept < 51
    assert ".predict.lock" in _objects(store, "killed")  # the dead run's: taken over
    again = subprocess.run([sys.executable, str(SCRIPT)], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    # exactly once: the rerun kept every part complete at the kill, wrote the others
    assert f"{rows} rows, {kept} parts kept" in again.stderr, again.stderr[-2000:]
    model, x = _model(), torch.from_numpy(np.random.default_rng(0).normal(size=(rows, 4))
                                          .astype("float32"))
    with torch.no_grad():
        expected = torch.cat([model(x[i:i + 4]) for i in range(0, rows, 4)]).numpy()
    assert np.array_equal(det_sdk.load_predictions(url, storage=store.storage), expected)
    assert ".predict.lock" not in _objects(store, "killed")
    # a refused credential: an error naming where to look, never the secret
    wrong = {**(store.storage or {}), "secret_key": "d3Jvbmcgc2VjcmV0IFpxOHYxWGtQ"}
    with pytest.raises(StorageError, match=r"refused: check checkpoint_storage\.access_key") as err:
        BucketPartStore.open(store.url("refused"), wrong).begin({"kind": "x"}, {})
    assert wrong["secret_key"] not in str(err.value)

