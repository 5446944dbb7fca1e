"""Issue 46: downloads stream. The CLI's timeout is for silence, not for the whole transfer;
a transfer cut short says so and leaves nothing behind; the master's answer streams as it
packs (no whole archive first).

A real HTTP server on a socket, in a thread of this process (no process started), plays
a master that sends slowly, goes silent, or hangs up mid-archive.
"""

from __future__ import annotations

import io
import tarfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from det_sdk.cli import common
from det_sdk.client import MasterClient, MasterError, MasterUnreachable
from det_sdk.errors import DetSdkError


def _archive(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


ARCHIVE = _archive({"predictions.npy": b"p" * 300_000, "samples/epoch_1.txt": b"e1"})


class _Master(BaseHTTPRequestHandler):
    """``/slow``: the archive in 6 pieces, 0.1 s apart; ``/silent``: headers, then
    nothing; ``/cut``: half the archive, then the connection closes; ``/busy``: 409
    "being kept" twice, then the archive."""

    protocol_version = "HTTP/1.1"
    asked: dict[str, int] = {}

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        path = self.path.rsplit("/", 1)[-1] if self.path.startswith("/api") else self.path
        key = self.path
        self.asked[key] = self.asked.get(key, 0) + 1
        if "busy" in self.path and self.asked[key] <= 2:
            body = b'{"detail": "job 3 has ended (COMPLETED) and the files it wrote are ' \
                   b'being kept: ask again in a few seconds"}'
            self.send_response(409)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("content-type", "application/gzip")
        if "cut" in path:
            self.send_header("content-length", str(len(ARCHIVE)))
        self.send_header("connection", "close")
        self.end_headers()
        if "silent" in path:
            time.sleep(0.6)
            return
        if "cut" in path:
            self.wfile.write(ARCHIVE[:len(ARCHIVE) // 2])
            self.wfile.flush()
            return
        step = len(ARCHIVE) // 6 + 1
        for i in range(0, len(ARCHIVE), step):
            self.wfile.write(ARCHIVE[i:i + step])
            self.wfile.flush()
            if "slow" in path:
                time.sleep(0.1)


@pytest.fixture
def master() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Master)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_transfer_longer_than_the_timeout_completes_while_bytes_keep_coming(
        master: str, tmp_path: Path) -> None:
    client = MasterClient(master, "t", timeout=0.3)
    out = io.BytesIO()
    started = time.monotonic()
    assert client.stream_to("/slow", out) == len(ARCHIVE)
    assert time.monotonic() - started > 0.5  # longer than the timeout, as a whole
    assert out.getvalue() == ARCHIVE


def test_silence_says_the_master_went_silent_not_that_none_answers(master: str) -> None:
    client = MasterClient(master, "t", timeout=0.2)
    with pytest.raises(MasterUnreachable, match=r"sent nothing for 0\.2 s while answering "
                                                r"GET /silent") as err:
        client.stream_to("/silent", io.BytesIO())
    assert "no master answers" not in str(err.value)


def test_a_cut_transfer_says_so_and_leaves_nothing_behind(master: str, tmp_path: Path
                                                           ) -> None:
    client = MasterClient(master, "t", timeout=5.0)
    dest = tmp_path / "out"
    with pytest.raises(DetSdkError, match=r"broke during GET /cut|not a whole"):
        common.download(lambda f: client.stream_to("/cut", f), "files of job 3", str(dest))
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no partial extraction, no temp


def test_the_files_are_asked_for_again_while_being_kept_then_unpacked(
        master: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    client = MasterClient(master, "t", timeout=5.0)
    monkeypatch.setattr(common, "connect", lambda args: client)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("the user's")  # an existing directory: kept
    assert common.files_download(SimpleNamespace(id="busy", dir=str(tmp_path / "out")),
                                 "jobs") == 0
    assert (tmp_path / "out" / "predictions.npy").read_bytes() == b"p" * 300_000
    assert (tmp_path / "out" / "samples" / "epoch_1.txt").read_bytes() == b"e1"
    assert (tmp_path / "out" / "mine.txt").read_text() == "the user's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert "job busy files ->" in capsys.readouterr().out


def test_a_master_error_is_its_message(master: str) -> None:
    client = MasterClient(master, "t", timeout=5.0)
    # two 409s "being kept", asked again; with no wait, the error itself
    with pytest.raises(MasterError, match=r"being kept.*\(HTTP 409\)"):
        client.download_files_to("jobs", "busy2", io.BytesIO(), wait=0)  # type: ignore[arg-type]
