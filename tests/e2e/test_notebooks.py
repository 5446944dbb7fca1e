"""Determined's notebooks (issue 58): ``det notebook start/list/config/logs/kill`` against a
real master, the real ``det`` CLI and a real JupyterLab from PyPI, reached only through
the master's proxy: opened in the real headless Chromium, a cell that runs
``det.keras.init()`` and fits a tiny model (its checkpoint then on the master), the
proxy's refusals (no sign-in, a task's token, another user, a path out of its prefix, a
cross-site websocket), a websocket to a kernel through it, and the idle timeout measured.

One master (2 slots) for the module.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from harness.master import Cluster, running_cluster, wait_until

pytestmark = [pytest.mark.timeout(420)]
pytest.importorskip("jupyterlab", reason="det notebook needs JupyterLab (the notebook extra)")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("notebooks"), slots=2) as c:
        yield c


def _nb(c: Cluster, nb_id: int) -> dict:
    with c.http() as http:
        return http.get(f"/api/v1/notebooks/{nb_id}").json()["notebook"]


def _ready(c: Cluster, nb_id: int) -> dict:
    def ready() -> dict | None:
        nb = _nb(c, nb_id)
        assert nb["state"] != "TERMINATED", c.det("notebook", "logs", str(nb_id)).stdout[-3000:]
        return nb if nb["ready"] else None
    return wait_until(f"notebook {nb_id}'s JupyterLab", ready, timeout=150, every=0.3)


def _ended(c: Cluster, nb_id: int, timeout: float = 60) -> dict:
    return wait_until(f"notebook {nb_id} to end", lambda: (
        lambda n: n if n["state"] == "TERMINATED" else None)(_nb(c, nb_id)),
        timeout=timeout, every=0.2)


def _started(c: Cluster, *words: str) -> int:
    out = c.det("notebook", "start", "-d", *words)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


def _other_user(c: Cluster) -> str:
    """A non-admin user's token."""
    with c.http() as http:
        r = http.post("/api/v1/users", json={"user": {"username": "nb-ann"},
                                             "password": "nb-ann-password"})
        assert r.status_code == 201, r.text
        login = http.post("/api/v1/auth/login", json={"username": "nb-ann",
                                                       "password": "nb-ann-password"})
        return str(login.json()["token"])


def _ws_status(url: str, headers: dict[str, str]) -> int:
    """The handshake's status of a websocket to ``url`` (101: opened, then closed)."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus

    async def go() -> int:
        try:
            async with connect(url, additional_headers=headers, proxy=None, open_timeout=30):
                return 101
        except InvalidStatus as err:
            return int(err.response.status_code)
    return asyncio.run(go())


@pytest.mark.stack_neutral  # the master, the CLI and JupyterLab: no Keras
def test_bad_config_is_refused_with_the_field(cluster: Cluster) -> None:
    for words, field in ((["--config", "idle_timeout=soon"], "idle_timeout"),
                         (["--config", "notebook_idle_type=never"], "notebook_idle_type"),
                         (["--config", "entrypoint=x"], "entrypoint"),
                         (["--config", "resources.slots=9"], "resources.slots")):
        out = cluster.det("notebook", "start", "-d", *words)
        assert out.returncode != 0 and field in out.stderr, (words, out.stderr)
    assert cluster.det_json("notebook", "list") == []


@pytest.mark.stack_neutral  # the master, the CLI and JupyterLab: no Keras
def test_the_proxy_lets_its_owner_in_and_nobody_else(cluster: Cluster) -> None:
    """Through the master only, for its owner or an admin; its kernels' websockets too; a
    killed notebook's proxy closes (409) and its port with it."""
    nb_id = _started(cluster, "--config", "resources.slots=0", "--config",
                     "description=proxy test")
    nb = _ready(cluster, nb_id)
    assert nb["service_address"] == f"/proxy/notebooks/{nb_id}/lab"
    assert [n["id"] for n in cluster.det_json("notebook", "list")] == [nb_id]
    config = cluster.det("notebook", "config", str(nb_id)).stdout
    assert "notebook_idle_type: kernels_or_terminals" in config and "entrypoint" not in config
    base = f"/proxy/notebooks/{nb_id}"
    with cluster.http() as http:  # its owner (the admin), by user token
        assert http.get(f"{base}/api/status").json()["started"]
        kernel = http.post(f"{base}/api/kernels", json={"name": "python3"})
        assert kernel.status_code == 201, kernel.text
        lab = http.get(f"{base}/lab")
        assert lab.status_code == 200 and "JupyterLab" in lab.text
    # nobody without sign-in gets a byte of Jupyter; nor a task's token; nor another user
    ann = _other_user(cluster)
    with cluster.http(None) as anon, cluster.http(ann) as other:
        for client, status in ((anon, 401), (other, 403)):
            for method, path in (("GET", f"{base}/lab"), ("GET", f"{base}/api/kernels"),
                                 ("POST", f"{base}/api/kernels")):
                r = client.request(method, path)
                assert r.status_code == status, (method, path, r.status_code, r.text[:200])
                assert "jupyter" not in r.text.lower() and "kernel" not in r.text.lower()
        # a path out of its prefix, however encoded
        with cluster.http() as http:
            for bad in (f"{base}/%2E%2E/%2E%2E/api/v1/me", f"{base}/a/..%2F..%2Fx"):
                assert http.get(bad).status_code in (400, 404), bad
            # a browser's cross-site request is refused (the cookie would be the browser's)
            r = http.post(f"{base}/api/kernels", headers={"Origin": "https://evil.example"})
            assert r.status_code == 403
    _check_signin_redirect(cluster, nb_id)
    # the kernel's websocket: through the proxy with sign-in, refused without
    ws = cluster.url.replace("http://", "ws://") + \
        f"{base}/api/kernels/{kernel.json()['id']}/channels"
    assert _ws_status(ws, {"Authorization": f"Bearer {cluster.token}"}) == 101
    assert _ws_status(ws, {}) == 403
    assert _ws_status(ws, {"Authorization": f"Bearer {ann}"}) == 403
    assert _ws_status(ws, {"Authorization": f"Bearer {cluster.token}",
                           "Origin": "https://evil.example"}) == 403
    # the web UI's Tasks page: its row, Open through the proxy, Kill and Logs as a command's
    with cluster.http() as http:
        rows = http.get("/ui/api/tasks").json()["tasks"]
    row = next(r for r in rows if r["kind"] == "notebook" and r["id"] == str(nb_id))
    assert row["open"] == f"{base}/lab" and row["may_kill"]
    assert row["kill"] == f"/ui/api/commands/{nb_id}/kill"
    assert row["logs"] == f"/ui/api/commands/{nb_id}/logs"
    # killed: the proxy answers 409 and JupyterLab's port is closed
    out = cluster.det("notebook", "kill", str(nb_id))
    assert out.returncode == 0 and f"Killed notebook {nb_id}" in out.stdout
    _ended(cluster, nb_id)
    with cluster.http() as http:
        r = http.get(f"{base}/api/status")
        assert r.status_code == 409 and "jupyter" not in r.text.lower()
    log = cluster.det("notebook", "logs", str(nb_id)).stdout
    assert "JupyterLab listens on 127.0.0.1:" in log
    port = int(log.split("JupyterLab listens on 127.0.0.1:", 1)[1].split()[0])
    with socket.socket() as s:
        s.settimeout(2)
        assert s.connect_ex(("127.0.0.1", port)) != 0, "a killed notebook's port still open"


def _check_signin_redirect(c: Cluster, nb_id: int) -> None:
    """A browser's page load without sign-in goes to the sign-in page and back; an API
    client keeps its 401 JSON; ``next`` is only ever a path of this master."""
    base = f"/proxy/notebooks/{nb_id}"
    page = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
    with c.http(None) as anon:
        r = anon.get(f"{base}/lab?reset", headers=page)
        assert r.status_code == 303, (r.status_code, r.text[:200])
        assert r.headers["location"] == \
            f"/ui/signin?next=%2Fproxy%2Fnotebooks%2F{nb_id}%2Flab%3Freset"
        assert "jupyter" not in r.text.lower()
        r = anon.get(f"{base}/api/kernels", headers={"Accept": "application/json"})
        assert r.status_code == 401 and r.json()["detail"]
        # the sign-in page carries next into its forms; signing in goes back there
        signin = anon.get(r"/ui/signin", params={"next": f"{base}/lab"})
        assert signin.status_code == 200
        assert f'name="next" value="{base}/lab"' in signin.text
        for bad in ("//evil.example", "https://evil.example", "/\\evil.example",
                    "http:/evil.example", "/%0d%0aSet-Cookie:x=1", " //evil.example"):
            r = anon.get("/ui/signin", params={"next": bad})
            assert r.status_code == 400 and "next" in r.text, (bad, r.status_code)
            r = anon.post("/ui/signin", data={"token": c.token, "next": bad})
            assert r.status_code == 400 and "next" in r.text, (bad, r.status_code)
            assert "location" not in r.headers and "set-cookie" not in r.headers, bad
        r = anon.post("/ui/signin", data={"token": c.token, "next": f"{base}/lab"})
        assert r.status_code == 303 and r.headers["location"] == f"{base}/lab", r.text[:200]
        # the session it made opens the notebook (the redirect's target)
        lab = anon.get(f"{base}/lab", headers=page)
        assert lab.status_code == 200 and "JupyterLab" in lab.text
        r = anon.post("/ui/signin", data={"username": "nb-nobody", "password": "wrong",
                                          "next": f"{base}/lab"})
        assert r.status_code == 401 and f'value="{base}/lab"' in r.text  # kept for a retry


@pytest.mark.stack_neutral  # the master, the CLI and JupyterLab: no Keras
def test_idle_timeout_kills_an_idle_notebook_and_spares_one_with_a_kernel(
        cluster: Cluster) -> None:
    """idle_timeout of 3 s: with no kernel (kernels_or_terminals) it is killed and its
    slot freed; with a running kernel (and 8 s) it is not, past two timeouts."""
    # busy's timeout leaves room for its kernel's start: until JupyterLab lists the
    # kernel, busy is idle too (a loaded machine takes seconds to start one)
    busy = _started(cluster, "--config", "idle_timeout=8s", "--config", "resources.slots=0")
    idle = _started(cluster, "--config", "idle_timeout=3s")
    _ready(cluster, busy)
    with cluster.http() as http:
        r = http.post(f"/proxy/notebooks/{busy}/api/kernels", json={"name": "python3"})
        assert r.status_code == 201, r.text
    # not _ready(idle): on a loaded machine its 3 s can pass before the test looks (it
    # ended TERMINATED while _ready still waited for it, in a run beside two busy loops)
    ended = _ended(cluster, idle, timeout=150)
    assert "idle" in ended["exit_status"] and "idle_timeout" in ended["exit_status"], ended
    assert "JupyterLab listens on 127.0.0.1:" in cluster.det("notebook", "logs",
                                                             str(idle)).stdout
    # not before its timeout: JupyterLab's start, then 3 s idle (polled each second)
    assert ended["ended"] - ended["started"] >= 2.0, ended
    # its slot is free: a command of 2 slots (the master's every slot) runs
    out = cluster.det("cmd", "run", "--config", "resources.slots=2", "--", "echo", "freed")
    assert out.returncode == 0 and "freed" in out.stdout, out.stderr
    # the one with a kernel is still running, well past 2 of its idle timeouts
    deadline = time.monotonic() + 17
    while time.monotonic() < deadline:
        assert _nb(cluster, busy)["state"] == "RUNNING"
        time.sleep(0.5)
    assert cluster.det("notebook", "kill", str(busy)).returncode == 0
    _ended(cluster, busy)


#: the idle_timeout of the idle types' notebooks: room for a kernel's start and a
#: websocket's opening on a loaded machine (until then either notebook looks idle)
TYPES_TIMEOUT = 15.0


def _kernels(c: Cluster, nb_id: int) -> list[dict]:
    with c.http() as http:
        r = http.get(f"/proxy/notebooks/{nb_id}/api/kernels")
        assert r.status_code == 200, r.text
        return list(r.json())


def _kernel_ws(c: Cluster, nb_id: int, kernel_id: str) -> Any:
    """A websocket to the kernel's channels through the proxy (JupyterLab counts it as
    a connection of the kernel), open until closed."""
    from websockets.sync.client import connect

    url = c.url.replace("http://", "ws://") + \
        f"/proxy/notebooks/{nb_id}/api/kernels/{kernel_id}/channels"
    return connect(url, additional_headers={"Authorization": f"Bearer {c.token}"},
                   proxy=None, open_timeout=60)


def _execute(ws: Any, code: str) -> None:
    """Send ``code`` to run on the kernel (Jupyter's message protocol, JSON framing)."""
    import uuid

    ws.send(json.dumps({
        "header": {"msg_id": uuid.uuid4().hex, "msg_type": "execute_request",
                   "session": uuid.uuid4().hex, "username": "test", "version": "5.3",
                   "date": ""},
        "parent_header": {}, "metadata": {}, "buffers": [], "channel": "shell",
        "content": {"code": code, "silent": False, "store_history": False,
                    "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}}))


@pytest.mark.stack_neutral  # the master, the CLI and JupyterLab: no Keras
def test_idle_types_kernel_connections_and_activity(cluster: Cluster) -> None:
    """Determined's other two idle types against the real JupyterLab: under
    ``kernel_connections`` a kernel counts only while something is connected to it (a
    kernel nobody looks at is idle); under ``activity`` only a busy or active kernel
    counts (an open, quiet kernel is idle). Both notebooks at once, to share the waits."""
    timeout = f"idle_timeout={TYPES_TIMEOUT:g}s"
    conn = _started(cluster, "--config", timeout, "--config", "resources.slots=0",
                    "--config", "notebook_idle_type=kernel_connections")
    act = _started(cluster, "--config", timeout, "--config", "resources.slots=0",
                   "--config", "notebook_idle_type=activity")
    # each, as soon as it is ready (until then it is idle, its timeout running): a
    # kernel; conn's connected to, act's running a loop until interrupted
    kernel, ws = {}, {}

    def set_up() -> bool:
        for nb_id in (conn, act):
            if nb_id in ws:
                continue
            nb = _nb(cluster, nb_id)
            assert nb["state"] != "TERMINATED", nb  # killed before its kernel: too slow
            if not nb["ready"]:
                continue
            with cluster.http() as http:
                r = http.post(f"/proxy/notebooks/{nb_id}/api/kernels",
                              json={"name": "python3"})
                assert r.status_code == 201, r.text
            kernel[nb_id] = r.json()["id"]
            ws[nb_id] = _kernel_ws(cluster, nb_id, kernel[nb_id])
            if nb_id == act:
                _execute(ws[act], "import time\nwhile True: time.sleep(0.1)")
        return len(ws) == 2

    try:
        wait_until("both notebooks' JupyterLab", set_up, timeout=150, every=0.3)
        watcher = ws[conn]
        wait_until("act's kernel to be busy", lambda: _kernels(cluster, act)[0]
                   ["execution_state"] == "busy", timeout=120, every=0.5)
        assert _kernels(cluster, conn)[0]["connections"] >= 1
        # past a whole timeout and more, neither is idle
        deadline = time.monotonic() + TYPES_TIMEOUT + 4
        while time.monotonic() < deadline:
            for nb_id in (conn, act):
                assert _nb(cluster, nb_id)["state"] == "RUNNING", _nb(cluster, nb_id)
            time.sleep(0.5)
        # conn: its kernel stays, with no connection; act: its kernel stays, not busy
        watcher.close()
        with cluster.http() as http:
            r = http.post(f"/proxy/notebooks/{act}/api/kernels/{kernel[act]}/interrupt")
            assert r.status_code == 204, r.text
        quiet = time.monotonic()
        wait_until("conn's kernel to have no connection", lambda: _kernels(cluster, conn)[0]
                   ["connections"] == 0, timeout=60, every=0.5)
    finally:
        for socket_ in ws.values():
            socket_.close()
    for nb_id, kind in ((conn, "kernel_connections"), (act, "activity")):
        ended = _ended(cluster, nb_id, timeout=TYPES_TIMEOUT + 90)
        assert f"idle ({kind})" in ended["exit_status"], ended
    # not before its timeout (polled each second: a second early at most)
    assert time.monotonic() - quiet >= TYPES_TIMEOUT - 1.5


# Run once per kernel: a second Shift+Enter that reached the page late (a loaded machine)
# prints the first run's line again instead of fitting a second run.
_FIT_CELL = r"""import json
if "_FIT_RESULT" not in globals():
    import numpy as np
    import det_sdk as det
    from det_sdk.keras._compat import keras
    ctx = det.keras.init(hparams={"lr": 0.05})
    x = np.random.default_rng(0).random((32, 3)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=ctx.wrap_optimizer(
        keras.optimizers.SGD(ctx.training.hparams["lr"])), loss="mse")
    xs, ys = ctx.wrap_data(x, y)
    ctx.fit(model, x=xs, y=ys, batch_size=16, epochs=1, validation_data=(xs, ys))
    _FIT_RESULT = json.dumps({"task": det.get_cluster_info().task_type,
                              "ckpt": ctx.core.checkpoint.latest_checkpoint})
print("FIT" + "-DONE " + _FIT_RESULT)
"""
#: Playwright's longest wait for one step (a page of JupyterLab through the proxy, its
#: kernel's start, a key press seen): generous, as the machine may be loaded 3x
STEP_MS = 120_000


def _notebook_file() -> str:
    return json.dumps({"cells": [{"cell_type": "code", "execution_count": None,
                                  "id": "fit", "metadata": {}, "outputs": [],
                                  "source": _FIT_CELL}],
                       "metadata": {"kernelspec": {"display_name": "Python 3",
                                                   "language": "python", "name": "python3"}},
                       "nbformat": 4, "nbformat_minor": 5})


def _signed_in_through_the_page(browser: Any, c: Cluster, path: str) -> Any:
    """A fresh context (no session) that opens ``path``, lands on the sign-in page, signs
    in with the user token and is sent back to ``path``; its page."""
    context = browser.new_context(viewport={"width": 1400, "height": 900},
                                  bypass_csp=True)  # wait_for_function evaluates
    context.set_default_timeout(STEP_MS)
    page = context.new_page()
    page.goto(f"{c.url}{path}", wait_until="domcontentloaded")
    assert "/ui/signin?next=" in page.url, page.url
    page.fill("#token", c.token)
    with page.expect_navigation(url=f"{c.url}{path}", wait_until="domcontentloaded"):
        page.click("#signin")
    return page


def test_a_cell_fits_a_keras_model_in_chromium(cluster: Cluster) -> None:
    """In Chromium, not yet signed in: the notebook's link leads to the sign-in page and
    back to the notebook, opened through the proxy; its cell run (``det.keras.init()``
    and a fit), its metrics and checkpoint then on the master."""
    from harness.browser import missing_reason, open_browser

    reason = missing_reason()
    if reason:
        pytest.skip(f"needs headless Chromium: {reason}")
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    ctx_dir = cluster.root / "nb-ctx"
    ctx_dir.mkdir()
    (ctx_dir / "fit.ipynb").write_text(_notebook_file())
    nb_id = _started(cluster, "-c", str(ctx_dir))
    nb = _ready(cluster, nb_id)
    with open_browser() as browser:
        page = _signed_in_through_the_page(browser, cluster,
                                           f"{nb['service_address']}/tree/fit.ipynb")
        editor = page.locator(".jp-Notebook .jp-Cell .jp-InputArea-editor").first
        editor.wait_for()
        # the kernel is up once the notebook's execution indicator says idle
        page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').first.wait_for()
        prompt = page.locator(".jp-Notebook .jp-Cell .jp-InputPrompt").first
        for _ in range(3):  # a key pressed while the page still settles can go nowhere
            editor.click()
            page.keyboard.press("Shift+Enter")
            try:  # queued: JupyterLab turns "[ ]" into "[*]" at once, before the kernel
                page.wait_for_function(
                    "(el) => !el.textContent.includes('[ ]')", arg=prompt.element_handle(),
                    timeout=STEP_MS / 2)
                break
            except PlaywrightTimeout:
                continue
        out = page.locator(".jp-OutputArea-output", has_text="FIT-DONE")
        try:
            out.wait_for(timeout=300_000)
        except PlaywrightTimeout:
            text = page.locator(".jp-Notebook").inner_text()[-3000:]
            raise AssertionError(f"the cell did not finish: {text}") from None
        result = json.loads(out.inner_text().split("FIT-DONE ", 1)[1].splitlines()[0])
        page.context.close()
    assert result["task"] == "COMMAND" and result["ckpt"]

    # what the fit reported is the task's on the master (as a command's run); the reports
    # go from a thread of the kernel that never holds up training: they may land after
    # the cell's line
    looks = []

    def reported() -> dict | None:
        with cluster.http() as http:
            cmd = http.get(f"/api/v1/commands/{nb_id}").json()["command"]
        looks.append(cmd["latest_metrics"])
        return cmd if "val_loss" in cmd["latest_metrics"].get("validation", {}).get(
            "metrics", {}) else None
    wait_until("the fit's validation metrics on the master", reported, timeout=120,
               every=0.5)
    print(f"the metrics were on the master at look {len(looks)}; the first saw {looks[0]}")
    # its checkpoint: in its run, kept with the notebook's files once it ends
    assert cluster.det("notebook", "kill", str(nb_id)).returncode == 0
    _ended(cluster, nb_id)
    files = cluster.root / "nb-files"
    wait_until("the notebook's files", lambda: cluster.det(
        "cmd", "download", str(nb_id), str(files)).returncode == 0, timeout=60, every=0.5)
    runs = json.loads(cluster.det("runs", "list", "--runs-dir", str(files / "det-runs"),
                                  "--json").stdout)
    assert len(runs) == 1 and runs[0]["checkpoints"] >= 1
    assert (files / "det-runs" / "1").is_dir()


@pytest.mark.stack_neutral  # the master, the CLI and JupyterLab: no Keras
def test_a_command_process_that_left_its_group_is_killed_too(cluster: Cluster) -> None:
    """`det cmd kill`: a process of the command that left its process group (setsid) is
    found by the task's environment and killed with the rest."""
    import os

    from tests.support import process_ended

    out = cluster.det("cmd", "run", "-d", "--config", "resources.slots=0", "--", "sh", "-c",
                      "setsid sh -c 'echo $$ > stray.pid; exec sleep 300' & wait")
    assert out.returncode == 0, out.stderr
    cmd_id = int(out.stdout.strip())
    pid_file = cluster.data_dir / "commands" / str(cmd_id) / "workdir" / "stray.pid"
    pid = wait_until("the stray's pid", lambda: pid_file.exists() and pid_file.read_text()
                     .strip().isdigit() and int(pid_file.read_text()), timeout=60, every=0.2)
    assert os.getpgid(pid) == pid  # a session and process group of its own
    assert cluster.det("cmd", "kill", str(cmd_id)).returncode == 0
    wait_until("the stray to be killed", lambda: process_ended(pid), timeout=60, every=0.2)
    wait_until("the command to end", lambda: cluster.det_json("cmd", "describe", str(cmd_id))
               ["state"] == "TERMINATED", timeout=60, every=0.5)


def _ready_slotless(cluster: Cluster) -> tuple[int, int]:
    """A notebook without a slot, ready: its id and JupyterLab's port (from its log)."""
    nb_id = _started(cluster, "--config", "resources.slots=0")
    _ready(cluster, nb_id)
    log = wait_until("JupyterLab's port in the log", lambda: (
        lambda text: "JupyterLab listens on 127.0.0.1:" in text and text)(
        cluster.det("notebook", "logs", str(nb_id)).stdout), timeout=60, every=0.5)
    return nb_id, int(log.split("JupyterLab listens on 127.0.0.1:", 1)[1].split()[0])


def _closed(port: int) -> bool:
    """Nothing listens on 127.0.0.1:``port``."""
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.stack_neutral  # the master, the CLI and JupyterLab: no Keras
def test_master_down_ends_a_running_notebook_and_closes_its_port(cluster: Cluster) -> None:
    """`det master down` (the cluster's down) with JupyterLab running (near the end of the
    module: the master is started again)."""
    nb_id, port = _ready_slotless(cluster)

    assert not _closed(port)
    cluster.down()
    wait_until("the notebook's port to close", lambda: _closed(port), timeout=60, every=0.5)
    cluster.up()
    assert _nb(cluster, nb_id)["state"] == "TERMINATED"


@pytest.mark.stack_neutral  # the master, the CLI and JupyterLab: no Keras
def test_a_master_killed_with_sigkill_leaves_no_notebook_running(cluster: Cluster) -> None:
    """Last in the module: the master killed with SIGKILL while JupyterLab runs; the next
    `det master up` shows the notebook TERMINATED and its JupyterLab gone, port closed."""
    import os
    import signal

    import psutil

    from tests.support import pid_gone, process_ended

    nb_id, port = _ready_slotless(cluster)
    lab = [p.pid for p in psutil.process_iter(["cmdline"])
           if f"--ServerApp.port={port}" in (p.info["cmdline"] or [])]
    assert len(lab) == 1, lab  # JupyterLab's own process

    master = int((cluster.data_dir / "master.pid").read_text().split()[0])
    os.kill(master, signal.SIGKILL)
    wait_until("the master to die", lambda: pid_gone(master), timeout=60)
    assert not _closed(port) and not process_ended(lab[0])  # the crash left JupyterLab running
    (cluster.data_dir / "master.pid").unlink(missing_ok=True)
    cluster.up()
    ended = _ended(cluster, nb_id, timeout=90)
    assert ended["exit_status"] == "the master restarted", ended
    wait_until("JupyterLab to end", lambda: process_ended(lab[0]), timeout=60, every=0.5)
    wait_until("the notebook's port to close", lambda: _closed(port), timeout=60, every=0.5)
    with cluster.http() as http:
        r = http.get(f"/proxy/notebooks/{nb_id}/api/status")
        assert r.status_code == 409 and "jupyter" not in r.text.lower()
    assert "the master restarted" in cluster.det("notebook", "logs", str(nb_id)).stdout
