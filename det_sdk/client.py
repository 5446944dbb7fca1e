"""An HTTP client of the master, shared by the CLI and by training processes.

Errors come out as :class:`MasterError` with the master's own message, or
:class:`MasterUnreachable` when nothing answers.

Lists come in pages (``limit`` rows, newest first, and a ``next_cursor``): :meth:`page`
reads one, :meth:`walk` follows the cursors, and the plain readers (``experiments``,
``jobs``, ``checkpoints``, ``trial_metrics``) return everything, or the newest ``limit``.

>>> # client = MasterClient("http://127.0.0.1:8080", token); client.experiments(limit=20)
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import httpx

from det_sdk._master_url import master_url
from det_sdk.atomic import write_atomic
from det_sdk.env import setting
from det_sdk.errors import DetSdkError, UsageError
from det_sdk.wire import dumps as wire_dumps

__all__ = [
    "MasterClient",
    "MasterError",
    "MasterUnreachable",
    "credentials_path",
    "load_token",
    "master_url",
    "save_token",
]


def quiet_http_loggers() -> None:
    """httpx logs every request at INFO ("HTTP Request: GET ... 200 OK"): a script that
    sets INFO logging (Determined's tutorials do) would get one line per metric report
    and preemption poll in its trial log. Quieted to WARNING unless the user set a level
    on those loggers themselves (NOTSET: nobody did); no other logger is touched.

    >>> quiet_http_loggers(); logging.getLogger("httpx").getEffectiveLevel() >= logging.WARNING
    True
    """
    for name in ("httpx", "httpcore"):
        if logging.getLogger(name).level == logging.NOTSET:
            logging.getLogger(name).setLevel(logging.WARNING)


quiet_http_loggers()

DEFAULT_MASTER = "http://127.0.0.1:8080"
# the largest pages the master serves (det_sdk.api; repeated here so that the client
# does not import pydantic for two numbers)
MAX_PAGE = 1000
MAX_METRICS = 10_000


class MasterError(DetSdkError, RuntimeError):
    """The master answered with an error; ``status`` is its HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class MasterUnreachable(DetSdkError, ConnectionError):
    """No master answered at the address."""


def credentials_path() -> Path:
    return Path(setting("DET_CREDENTIALS") or Path.home() / ".det" / "credentials.json")


def load_token(url: str) -> str | None:
    """The user token for ``url``: ``DET_USER_TOKEN``, else the one ``det master up`` saved
    (found for ``host:port`` as for ``http://host:port``)."""
    token = setting("DET_USER_TOKEN")
    if token:
        return token
    try:
        url = master_url(url)
    except UsageError:
        return None
    try:
        return json.loads(credentials_path().read_text()).get(url.rstrip("/"))
    except (OSError, json.JSONDecodeError):
        return None


def save_token(url: str, token: str) -> None:
    """Remember ``token`` for ``url``, in a file only its owner can read."""
    path = credentials_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        data = {}
    data[url.rstrip("/")] = token
    write_atomic(path, json.dumps(data, indent=1), mode=0o600)


class MasterClient:
    """Calls of the master's REST API."""

    def __init__(self, url: str, token: str | None, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.url = master_url(url)  # host:port too, as Determined's clients take it
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout,
                                  transport=transport)

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """One call; ``json=`` bodies go through :func:`det_sdk.wire.dumps` (NaN and
        infinities as "NaN", "Infinity", "-Infinity", which the master's models read
        back as floats; httpx's own encoding refuses them)."""
        if "json" in kwargs:
            kwargs["content"] = wire_dumps(kwargs.pop("json")).encode()
            kwargs["headers"] = {**(kwargs.get("headers") or {}),
                                 "content-type": "application/json"}
        try:
            resp = self._http.request(method, path, **kwargs)
        except httpx.TransportError as err:
            raise self._transport_error(err, method, path) from None
        if resp.status_code >= 400:
            raise self._master_error(resp)
        if resp.status_code == 204 or not resp.content:
            return None
        if resp.headers.get("content-type", "").startswith("application/json"):
            return resp.json()
        return resp.content

    def _transport_error(self, err: httpx.TransportError, method: str,
                         path: str) -> MasterUnreachable:
        """What went wrong on the way, in words: nobody answering, an answer that went
        silent (the client's timeout is for silence, not for a whole transfer), or a
        connection that broke."""
        if isinstance(err, (httpx.ConnectError, httpx.ConnectTimeout)):
            return MasterUnreachable(f"no master answers at {self.url} ({err})")
        if isinstance(err, httpx.TimeoutException):
            silence = self._http.timeout.read
            return MasterUnreachable(
                f"the master at {self.url} sent nothing for {silence:g} s while answering "
                f"{method} {path} ({type(err).__name__}): it is busy or stuck; try again, "
                "or give the client a longer timeout")
        return MasterUnreachable(f"the connection to the master at {self.url} broke during "
                                 f"{method} {path}: {type(err).__name__}: {err}")

    @staticmethod
    def _master_error(resp: httpx.Response) -> MasterError:
        try:
            detail = resp.json().get("detail", resp.text)
        except ValueError:
            detail = resp.text
        if isinstance(detail, list):  # FastAPI validation errors
            detail = "; ".join(
                f"{'.'.join(str(p) for p in d.get('loc', [])[1:])}: {d.get('msg')}"
                for d in detail
            )
        return MasterError(resp.status_code, f"master: {detail} (HTTP {resp.status_code})")

    def stream_to(self, path: str, out: IO[bytes]) -> int:
        """GET ``path`` and write its body to ``out`` as it arrives (a download of
        hundreds of MB is neither held in memory nor timed as a whole: only silence
        longer than the client's timeout ends it). Returns the bytes written."""
        written = 0
        try:
            with self._http.stream("GET", path) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    raise self._master_error(resp)
                for chunk in resp.iter_bytes(1 << 20):
                    out.write(chunk)
                    written += len(chunk)
        except httpx.TransportError as err:
            raise self._transport_error(err, "GET", path) from None
        return written

    # --- experiments, trials, jobs ------------------------------------------------------

    def create_experiment(self, config: dict[str, Any], archive: bytes,
                          progress: Callable[[int, int], None] | None = None) -> int:
        return int(self.submit_experiment(config, archive, progress)["id"])

    def submit_experiment(self, config: dict[str, Any], archive: bytes,
                          progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Create an experiment; the master's answer: ``id`` and ``warnings`` (a list)."""
        out = self._request_create("/api/v1/experiments", config, archive, progress)
        return {"id": int(out["id"]), "warnings": list(out.get("warnings") or [])}

    def create_job(self, config: dict[str, Any], archive: bytes,
                   progress: Callable[[int, int], None] | None = None) -> int:
        return self._create("/api/v1/jobs", config, archive, progress)

    def _create(self, path: str, config: dict[str, Any], archive: bytes,
                progress: Callable[[int, int], None] | None) -> int:
        return int(self._request_create(path, config, archive, progress)["id"])

    def _request_create(self, path: str, config: dict[str, Any], archive: bytes,
                        progress: Callable[[int, int], None] | None) -> dict[str, Any]:
        # A config's values are untyped: its non-finite numbers (YAML .nan/.inf) travel as
        # JSON's NaN/Infinity literals, which the master (Python's json) reads as floats;
        # the strings "NaN" of det_sdk.wire could not be told from a string hyperparameter.
        body = json.dumps({"config": config,
                           "model_definition": base64.b64encode(archive).decode()}).encode()

        def chunks() -> Iterator[bytes]:
            step = 256 * 1024
            for i in range(0, len(body), step):
                yield body[i:i + step]
                if progress:
                    progress(min(i + step, len(body)), len(body))

        out = self.request("POST", path, content=chunks(),
                           headers={"content-type": "application/json",
                                    "content-length": str(len(body))})
        return dict(out)

    # --- pages ----------------------------------------------------------------------------

    def page(self, path: str, limit: int | None = None, cursor: str | None = None,
             **params: Any) -> dict[str, Any]:
        """One page of a list (``/api/v1/experiments``, ``/api/v1/jobs``,
        ``/api/v1/checkpoints``, ``/api/v1/experiments/{id}/trials``): its rows, ``total``
        and ``next_cursor`` (None on the last page).

        >>> # client.page("/api/v1/experiments", limit=20)["total"]
        """
        query = {k: v for k, v in params.items() if v is not None}
        if limit is not None:
            query["limit"] = limit
        if cursor is not None:
            query["cursor"] = cursor
        return self.request("GET", path, params=query)

    def walk(self, path: str, key: str, limit: int | None = None,
             page_size: int | None = None, **params: Any) -> Iterator[dict[str, Any]]:
        """The rows (``page[key]``) of a list page after page, following the cursors;
        at most ``limit`` of them (all if None).

        >>> # [e["id"] for e in client.walk("/api/v1/experiments", "experiments", limit=5)]
        """
        cursor, seen = None, 0
        while True:
            size = page_size
            if limit is not None:
                size = min(limit - seen, size or MAX_PAGE)
            page = self.page(path, size, cursor, **params)
            for row in page[key]:
                yield row
                seen += 1
            cursor = page["next_cursor"]
            if cursor is None or (limit is not None and seen >= limit):
                return

    # --- experiments, trials, jobs (continued) ----------------------------------------------

    def experiments(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Experiment summaries (state, counts; no trials), newest first: all, or the
        newest ``limit``."""
        return list(self.walk("/api/v1/experiments", "experiments", limit, MAX_PAGE))

    def experiment(self, exp_id: int, all_trials: bool = False) -> dict[str, Any]:
        """An experiment with the first page of its trials (with ``all_trials``: all)."""
        exp = self.request("GET", f"/api/v1/experiments/{exp_id}")
        if all_trials and exp.get("trials_next_cursor"):
            exp["trials"] += self.trials(exp_id, after=exp["trials_next_cursor"])
            exp["trials_next_cursor"] = None
        return exp

    def trials(self, exp_id: int, after: str | None = None) -> list[dict[str, Any]]:
        """All of an experiment's trials in id order (from cursor ``after``)."""
        out, cursor = [], after
        while True:
            page = self.page(f"/api/v1/experiments/{exp_id}/trials", MAX_PAGE, cursor)
            out += page["trials"]
            cursor = page["next_cursor"]
            if cursor is None:
                return out

    def kill_experiment(self, exp_id: int) -> dict[str, Any]:
        return self.request("POST", f"/api/v1/experiments/{exp_id}/kill")

    def pause_experiment(self, exp_id: int) -> dict[str, Any]:
        return self.request("POST", f"/api/v1/experiments/{exp_id}/pause")

    def activate_experiment(self, exp_id: int) -> dict[str, Any]:
        return self.request("POST", f"/api/v1/experiments/{exp_id}/activate")

    def trial(self, trial_id: int) -> dict[str, Any]:
        return self.request("GET", f"/api/v1/trials/{trial_id}")

    def trial_metrics(self, trial_id: int, group: str | None = None,
                      after_steps: int | None = None,
                      limit: int | None = None, stage: str | None = None
                      ) -> list[dict[str, Any]]:
        """A trial's reports in (steps, group) order past ``after_steps``: one page of
        about ``limit`` rows, or (``limit=None``) all of them, page after page.
        ``stage``: that stage's series (det_sdk.stages); None: the default stage's."""
        params: dict[str, Any] = {"group": group} if group else {}
        if stage is not None:
            params["stage"] = stage
        if limit is not None:
            if after_steps is not None:
                params["after_steps"] = after_steps
            return self.request("GET", f"/api/v1/trials/{trial_id}/metrics",
                                params={**params, "limit": limit})
        out: list[dict[str, Any]] = []
        while True:
            page = self.trial_metrics(trial_id, group, after_steps, MAX_METRICS, stage)
            out += page
            if len(page) < MAX_METRICS:  # a short page is the last (see the endpoint)
                return out
            after_steps = page[-1]["steps_completed"]

    def system_metrics(self, trial_id: int, group: str | None = None) -> Iterator[dict[str, Any]]:
        """A trial's profiler records (det_sdk.profiler) of ``group`` (all if None),
        oldest first, page after page."""
        after = 0
        while True:
            params: dict[str, Any] = {"after_id": after, "limit": 1000}
            if group is not None:
                params["group"] = group
            page = self.request("GET", f"/api/v1/trials/{trial_id}/system-metrics",
                                params=params)
            yield from page
            if len(page) < 1000:
                return
            after = page[-1]["id"]

    def logs(self, kind: str, task_id: int, offset: int = 0) -> dict[str, Any]:
        return self.request("GET", f"/api/v1/{kind}/{task_id}/logs", params={"offset": offset})

    def jobs(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Job summaries, newest first: all, or the newest ``limit``."""
        return list(self.walk("/api/v1/jobs", "jobs", limit, MAX_PAGE))

    def job(self, job_id: int) -> dict[str, Any]:
        return self.request("GET", f"/api/v1/jobs/{job_id}")

    def job_command(self, job_id: int, command: str) -> dict[str, Any]:
        """``pause``, ``activate`` or ``kill`` a job: ``{"state": ...}`` after it."""
        return self.request("POST", f"/api/v1/jobs/{job_id}/{command}")

    def report_job_progress(self, alloc_id: str, body: dict[str, Any]) -> None:
        """A job's chief: ``{"rows_done", "rows_total", "output"}``."""
        self.request("POST", f"/api/v1/allocations/{alloc_id}/progress", json=body)

    # --- checkpoints --------------------------------------------------------------------

    def checkpoints(self, trial_id: int | None = None,
                    limit: int | None = None) -> list[dict[str, Any]]:
        """Checkpoints (of one trial), newest first: all, or the newest ``limit``."""
        return list(self.walk("/api/v1/checkpoints", "checkpoints", limit, MAX_PAGE,
                              trial_id=trial_id))

    def trial_checkpoint(self, trial_id: int, best: bool = False,
                         stage: str | None = None) -> dict[str, Any]:
        params = {"best": "true"} if best else {"latest": "true"}
        if stage is not None:
            params["stage"] = stage
        return self.request("GET", f"/api/v1/trials/{trial_id}/checkpoints", params=params)[0]

    def checkpoint(self, uuid: str) -> dict[str, Any]:
        return self.request("GET", f"/api/v1/checkpoints/{uuid}")

    def download_checkpoint(self, uuid: str) -> bytes:
        return self.request("GET", f"/api/v1/checkpoints/{uuid}/download")

    def download_files(self, kind: str, task_id: int) -> bytes:
        """The files trial or job ``task_id`` (``kind``: ``"trials"`` or ``"jobs"``) wrote
        into its working directory, kept when it ended, as a .tar.gz."""
        return self.request("GET", f"/api/v1/{kind}/{task_id}/files")

    def download_files_to(self, kind: str, task_id: int, out: IO[bytes],
                          wait: float = 600.0) -> int:
        """:meth:`download_files`, streamed into ``out``; while the master answers that
        the task's files are still being kept (409, just after it ended), asked again
        for up to ``wait`` seconds. Returns the bytes written."""
        import time

        deadline = time.monotonic() + wait
        while True:
            try:
                return self.stream_to(f"/api/v1/{kind}/{task_id}/files", out)
            except MasterError as err:
                if err.status != 409 or "being kept" not in str(err) or \
                        time.monotonic() > deadline:
                    raise
            time.sleep(0.5)

    def download_checkpoint_to(self, uuid: str, out: IO[bytes]) -> int:
        """:meth:`download_checkpoint`, streamed into ``out``."""
        return self.stream_to(f"/api/v1/checkpoints/{uuid}/download", out)

    # --- what a running task reports ----------------------------------------------------------

    def report_metrics(self, trial_id: int, body: dict[str, Any]) -> None:
        self.request("POST", f"/api/v1/trials/{trial_id}/metrics", json=body)

    def report_checkpoint(self, body: dict[str, Any]) -> None:
        self.request("POST", "/api/v1/checkpoints", json=body)

    def report_progress(self, trial_id: int, progress: float) -> None:
        self.request("POST", f"/api/v1/trials/{trial_id}/progress", json={"progress": progress})

    def searcher_operation(self, trial_id: int) -> dict[str, Any] | None:
        return self.request("GET", f"/api/v1/trials/{trial_id}/searcher/operation")

    def complete_operation(self, trial_id: int, unit: str, length: int,
                           metric: float) -> dict[str, Any] | None:
        return self.request("POST", f"/api/v1/trials/{trial_id}/searcher/completed_operation",
                            json={"unit": unit, "length": length, "searcher_metric": metric})

    def acknowledge_preemption(self, alloc_id: str) -> None:
        self.request("POST", f"/api/v1/allocations/{alloc_id}/signals/ack_preemption")

    def preemption(self, alloc_id: str, timeout_seconds: float) -> bool:
        out = self.request(
            "GET", f"/api/v1/allocations/{alloc_id}/signals/preemption",
            params={"timeout_seconds": timeout_seconds}, timeout=timeout_seconds + 10,
        )
        return bool(out["preempt"])
