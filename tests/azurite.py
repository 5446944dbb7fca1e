"""A real Azure Blob Storage server for the tests: Azurite (npm ``azurite``, installed by
scripts/setup.sh under ``.tools/azurite``), its blob service started in a temporary folder
on a free port and stopped after.

    with Azurite(tmp_dir) as az:
        az.create_container("ckpts"); az.connection_string
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from email.utils import formatdate
from pathlib import Path
from types import TracebackType

from det_sdk.config.azure_strings import DEV_ACCOUNT, DEV_KEY
from det_sdk.launch.ports import unused_port

ROOT = Path(__file__).resolve().parents[1]


def azurite_binary() -> str | None:
    """``azurite-blob`` under the repo's ``.tools/azurite`` (setup.sh), else on PATH."""
    local = ROOT / ".tools" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
    return str(local) if local.is_file() else shutil.which("azurite-blob")


class Azurite:
    """``azurite-blob`` with its well-known development account (public, not a secret)."""

    account, key = DEV_ACCOUNT, DEV_KEY

    def __init__(self, workdir: str | os.PathLike[str]) -> None:
        self.workdir = Path(workdir)
        self.proc: subprocess.Popen[bytes] | None = None
        self.account_url = ""

    @property
    def connection_string(self) -> str:
        return (f"DefaultEndpointsProtocol=http;AccountName={self.account};"
                f"AccountKey={self.key};BlobEndpoint={self.account_url};")

    def start(self, timeout: float = 60.0) -> Azurite:
        binary = azurite_binary()
        if binary is None:
            raise RuntimeError("no azurite-blob: npm install --prefix .tools/azurite azurite "
                               "(scripts/setup.sh)")
        port = unused_port()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.account_url = f"http://127.0.0.1:{port}/{self.account}"
        self.proc = subprocess.Popen(
            [binary, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location",
             str(self.workdir), "--silent", "--skipApiVersionCheck", "--loose",
             "--disableTelemetry"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(self.account_url + "?comp=list", timeout=2).close()
                return self
            except urllib.error.HTTPError:
                return self  # an answer (403: anonymous): it is up
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("azurite-blob did not start") from None
                time.sleep(0.2)

    def create_container(self, name: str) -> None:
        """Create container ``name`` (Create Container, signed with the account's Shared
        Key: obstore has no container calls)."""
        date, version = formatdate(usegmt=True), "2021-08-06"
        resource = f"/{self.account}/{self.account}/{name}\nrestype:container"
        # VERB, 4 empty headers, Content-Type, 6 empty headers (urllib sends a type with a body)
        to_sign = ("PUT\n" + "\n" * 4 + "application/octet-stream\n" + "\n" * 6
                   + f"x-ms-date:{date}\nx-ms-version:{version}\n" + resource)
        sig = base64.b64encode(hmac.new(base64.b64decode(self.key), to_sign.encode(),
                                        hashlib.sha256).digest()).decode()
        req = urllib.request.Request(
            f"{self.account_url}/{name}?restype=container", method="PUT", data=b"",
            headers={"Content-Type": "application/octet-stream", "x-ms-date": date,
                     "x-ms-version": version,
                     "Authorization": f"SharedKey {self.account}:{sig}"})
        try:
            urllib.request.urlopen(req, timeout=10).close()
        except urllib.error.HTTPError as err:
            if err.code != 409:  # 409: it exists
                raise

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None

    def __enter__(self) -> Azurite:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
