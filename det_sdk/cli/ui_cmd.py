"""``det ui`` (a link that signs a browser in to the master's web UI) and ``det tensorboard
run`` (TensorBoard in this process until Ctrl-C; ``det tensorboard start`` asks the master).

Their arguments are defined in ``det_sdk.cli.main`` (this module is imported when one of
them runs):

>>> from det_sdk.cli.main import build_parser
>>> args = build_parser().parse_args(["tensorboard", "run", "3", "4", "--port", "0"])
>>> args.experiment_ids, args.func.__name__
([3, 4], 'tensorboard')
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from argparse import Namespace
from pathlib import Path
from typing import Any

from det_sdk.errors import DetSdkError, UsageError

__all__ = ["TensorBoardError", "tensorboard", "ui"]


class TensorBoardError(DetSdkError, RuntimeError):
    """TensorBoard is not installed here, or did not start (its own error included)."""


def _token(master: str) -> str:
    from det_sdk.client import load_token

    token = load_token(master)
    if token is None:
        raise UsageError(f"no token for {master}: start it with `det master up`, or set "
                         "DET_USER_TOKEN")
    return token


def _call(master: str, method: str, path: str, **kwargs: Any) -> Any:
    """One call of the UI's API with the user token; errors with the master's message."""
    import httpx

    from det_sdk.client import MasterError, MasterUnreachable

    headers = {"Authorization": f"Bearer {_token(master)}", "X-Det-UI": "1"}
    try:
        resp = httpx.request(method, master.rstrip("/") + path, headers=headers, timeout=30,
                             **kwargs)
    except httpx.TransportError as err:
        raise MasterUnreachable(f"no master at {master} ({err}); start one with "
                                "`det master up`") from None
    if resp.status_code >= 400:
        try:
            detail = resp.json().get("detail", resp.text)
        except ValueError:
            detail = resp.text
        raise MasterError(resp.status_code, f"{master}: {detail}")
    return resp.json()


def ui(args: Namespace) -> int:
    """Print (and with ``--open``, open) a one-time link that signs a browser in."""
    answer = _call(args.master, "POST", "/ui/api/signin-codes")
    url = args.master.rstrip("/") + answer["path"]
    print("Open this link to sign in to the web UI (it works once, within 5 minutes):")
    print(f"  {url}")
    print(f"Later visits: {args.master.rstrip('/')}/ui/ (the browser stays signed in)")
    if args.open:
        import webbrowser

        if not webbrowser.open(url):
            print("det: could not open a browser here; open the link above", file=sys.stderr)
    return 0


def _logdir_args(args: Namespace) -> tuple[list[str], str]:
    """TensorBoard's logdir arguments, and a line saying what it shows."""
    if args.runs_dir:
        if args.experiment_ids:
            raise UsageError("give experiment ids or --runs-dir, not both")
        if not os.path.isdir(args.runs_dir):
            raise UsageError(f"--runs-dir {args.runs_dir}: no such directory")
        return ["--logdir", args.runs_dir], f"local runs in {args.runs_dir}"
    if not args.experiment_ids:
        raise UsageError("which experiments? det tensorboard run EXP_ID... (or --runs-dir "
                         "det-runs)")
    ids = ",".join(str(e) for e in args.experiment_ids)
    dirs = _call(args.master, "GET", "/ui/api/tensorboard-dirs",
                 params={"experiment_ids": ids})
    if not dirs:
        raise UsageError(f"experiments {ids} have no trials")
    many = len(args.experiment_ids) > 1
    # name:path pairs; TensorBoard picks up directories that appear later (trials queued)
    prefix = (lambda d: f"exp{d['experiment_id']}_") if many else (lambda d: "")
    spec = ",".join(f"{prefix(d)}trial_{d['trial_id']}:{d['path']}" for d in dirs)
    ready = sum(d["exists"] for d in dirs)
    return ["--logdir_spec", spec], (f"{len(dirs)} trials of experiment(s) {ids} "
                                     f"({ready} with event files so far)")


def tensorboard(args: Namespace) -> int:
    """Run TensorBoard until interrupted; print its URL; tell the master (for its pages)."""
    if importlib.util.find_spec("tensorboard") is None:
        raise TensorBoardError("TensorBoard is not installed here: pip install tensorboard")
    logdir, what = _logdir_args(args)
    # `kill` (or a test's terminate) must stop TensorBoard too: exit through `finally`
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # --port 0: TensorBoard binds a free port itself and writes it to its info file under
    # its TMPDIR (no "find a free port, bind it later" race)
    tmp = tempfile.mkdtemp(prefix="det-tensorboard-")
    cmd = [sys.executable, "-m", "tensorboard.main", *logdir, "--host", args.host,
           "--port", str(args.port), "--reload_interval", "5"]
    env = {**os.environ, "TMPDIR": tmp,
           "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        url = _wait_serving(args.host, Path(tmp), proc, timeout=120)
        if url is None:
            err = proc.stderr.read() if proc.poll() is not None and proc.stderr else ""
            raise TensorBoardError(f"TensorBoard did not start on {args.host}: "
                                   f"{err.strip()[-2000:]}")
        print(f"TensorBoard at {url} showing {what}", flush=True)
        if args.experiment_ids:
            with contextlib.suppress(Exception):  # the link on the pages is a nicety
                _call(args.master, "POST", "/ui/api/tensorboards",
                      json={"url": url, "pid": proc.pid, "experiments": args.experiment_ids})
        print("Press Ctrl-C to stop it.", flush=True)
        return proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def _wait_serving(host: str, tmp: Path, proc: subprocess.Popen[str],
                  timeout: float) -> str | None:
    """TensorBoard's URL once it answers (None if it exited or ``timeout`` passed)."""
    import httpx

    from det_sdk.master.tensorboards import served_port

    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        port = served_port(tmp, proc.pid)
        if port is not None:
            url = f"http://{host}:{port}/"
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    return url
            except httpx.HTTPError:
                pass
        time.sleep(0.3)
    return None
