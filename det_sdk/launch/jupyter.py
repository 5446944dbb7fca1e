"""A notebook's task (``det notebook start``; the master's side:
``det_sdk.master.notebooks``): JupyterLab in the foreground, reached only through the
master.

``python3 -m det_sdk.launch.jupyter`` starts JupyterLab (``python3 -m jupyterlab``, the
task's interpreter: its kernels are that interpreter too, with the task's environment,
so ``det.keras.init()`` in a cell knows it is in a task) with the task's working
directory (the context directory's copy) as its root, on a free port of 127.0.0.1,
``base_url`` the master's proxy path, and a new random token that it tells the master
with the task's token: the master's proxy adds it to what it forwards, the user never
sees it, and JupyterLab's own sign-in page is never shown (no password either).

A kernel leaves JupyterLab's process group (jupyter_client starts it in a session of its
own), so the task's kill would miss it: this process is their subreaper and ends every
one of them when it is told to stop, and when JupyterLab ends.

>>> jupyter_args(8888, "/proxy/notebooks/3/", Path("/w"))[:3]
['-m', 'jupyterlab', '--no-browser']
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from det_sdk.launch.ports import start_listening
from det_sdk.launch.sshd import _end_all, _subreaper

TYPE_CHECKING = False
if TYPE_CHECKING:
    from det_sdk.info import ClusterInfo

__all__ = ["jupyter_args", "main", "proxy_prefix"]

log = logging.getLogger("det_sdk.launch.jupyter")

START_SECONDS = 120.0  # for JupyterLab to listen (its first start builds caches)


def proxy_prefix(nb_id: int) -> str:
    """The master's proxy path of notebook ``nb_id`` (``det_sdk.master.notebooks``'s,
    which the task cannot import: a task imports no master module).

    >>> proxy_prefix(3)
    '/proxy/notebooks/3/'
    """
    return f"/proxy/notebooks/{int(nb_id)}/"


def jupyter_args(port: int, base_url: str, root: Path) -> list[str]:
    """JupyterLab's command line after the interpreter: 127.0.0.1 only, no browser, no
    password, the proxy's path as its base, ``root`` as its root directory.

    >>> "--ServerApp.ip=127.0.0.1" in jupyter_args(1, "/p/", Path("/w"))
    True
    """
    return ["-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
            f"--ServerApp.base_url={base_url}", f"--ServerApp.root_dir={root}",
            "--ServerApp.password=", "--ServerApp.open_browser=False",
            # the proxy forwards the browser's address as the origin it checked itself
            "--ServerApp.allow_remote_access=False",
            # no phoning home for news or updates (a cluster's node may have no internet)
            "--LabApp.news_url=", "--LabApp.check_for_updates_class="
            "jupyterlab.NeverCheckForUpdate",
            # a task run as root (a container's account) is the master's account: allowed
            *(["--ServerApp.allow_root=True"] if os.geteuid() == 0 else [])]


def _report(info: ClusterInfo, nb_id: int, port: int, token: str) -> None:
    from det_sdk.client import MasterClient

    client = MasterClient(info.master_url, info.session_token)
    client.request("POST", f"/api/v1/notebooks/{nb_id}/ready",
                   json={"port": port, "token": token})


def _start(nb_id: int, token: str, runtime: Path) -> tuple[subprocess.Popen[bytes], int]:
    """JupyterLab, listening (a port taken between the pick and its bind: another)."""
    env = {**os.environ, "JUPYTER_TOKEN": token, "JUPYTER_RUNTIME_DIR": str(runtime)}
    started = start_listening(
        lambda port: subprocess.Popen([sys.executable, *jupyter_args(
            port, proxy_prefix(nb_id), Path.cwd())], stdin=subprocess.DEVNULL, env=env),
        START_SECONDS)
    if started is None:
        raise SystemExit("det notebook: JupyterLab did not start (its output is above)")
    return started


def main(argv: list[str] | None = None) -> int:
    """Run the notebook's JupyterLab until the task is told to stop; its exit code."""
    logging.basicConfig(level=logging.INFO, format="det notebook: %(message)s")
    from det_sdk.info import get_cluster_info

    info = get_cluster_info()
    words = info.allocation_id.split("-") if info is not None else []
    if info is None or len(words) < 3 or not words[1].isdigit():
        raise SystemExit("det_sdk.launch.jupyter runs in a notebook's task "
                         "(det notebook start)")
    nb_id = int(words[1])
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    _subreaper()
    token = secrets.token_urlsafe(32)
    runtime = Path(tempfile.mkdtemp(prefix=f"det-notebook-{nb_id}-"))  # 0700: its secrets
    try:
        proc, port = _start(nb_id, token, runtime)
        _report(info, nb_id, port, token)
        log.info("JupyterLab listens on 127.0.0.1:%s (det notebook open %s)", port, nb_id)
        while not stop and proc.poll() is None:
            time.sleep(0.2)
        code = proc.poll()
        return 0 if stop else (code if code is not None else 1)
    finally:
        _end_all()
        shutil.rmtree(runtime, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
