"""The master over HTTP: :class:`MasterSession`, the session of a trial or job on the
cluster."""

from __future__ import annotations

import atexit
import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from det_sdk.config import Length
from det_sdk.errors import ReportRefusedError, StateError
from det_sdk.session.base import MetricGroup, Session
from det_sdk.stages import DEFAULT_STAGE, record_fields
from det_sdk.storage import CheckpointNotFoundError, check_uuid, open_storage
from det_sdk.wire import check_metrics

__all__ = ["MasterSession"]

log = logging.getLogger("det_sdk.session")  # the name it had before det_sdk.session was a package


class MasterSession(Session):
    """A trial's (or job's) session with the master, over HTTP.

    Reports never hold up training: they go into a queue that a background thread
    delivers in order, retrying with backoff while the master is unreachable. The
    master keeps one value per (trial, group, step), so a report delivered twice
    after a retry counts once. ``close()`` waits for the queue to drain.
    Only the chief process (``writer=True``) reports and watches for preemption.
    """

    def __init__(self, info: Any, writer: bool = True, client: Any = None) -> None:
        from det_sdk.client import MasterClient

        self.info = info
        self.writer = writer
        self.trial_id = info.trial_id
        self.client = client or MasterClient(info.master_url, info.session_token)
        storage = (info.config.get("checkpoint_storage") or {}).get("host_path")
        self.storage = open_storage(info.config.get("checkpoint_storage"))
        self.latest_checkpoint = info.latest_checkpoint
        # TensorBoard event files go beside the checkpoints, in the trial's storage, where
        # `det tensorboard start EXP_ID` finds them (det_sdk.master.tensorboards.
        # tensorboard_dir).
        self.tensorboard_dir = (
            Path(storage) / "tensorboard" / str(info.experiment_id) / f"trial_{info.trial_id}"
            if storage and info.trial_id is not None else None)
        # The trial's working directory goes when the trial ends: what callbacks write
        # (ModelCheckpoint, CSVLogger) is kept beside the checkpoints instead.
        self.files_dir = (
            Path(storage) / "trial_files" / str(info.experiment_id) / f"trial_{info.trial_id}"
            if storage and info.trial_id is not None else None)
        self._queue: queue.Queue[tuple[str, Any] | None] = queue.Queue()
        self._preempt = threading.Event()
        self._closed = threading.Event()
        self._failures = 0
        self._refused: ReportRefusedError | None = None  # a report the master refused
        self._system_lock = threading.Lock()
        self._system_pending = 0  # the profiler's reports queued (bounded)
        self.system_dropped = 0
        if writer:
            threading.Thread(target=self._deliver, daemon=True, name="det-reports").start()
            # The script may end right after fit: deliver what is queued before exit.
            atexit.register(self._close_at_exit)
            # a trial's pause or kill, and a job's (det job pause): the same long-poll
            threading.Thread(target=self._watch_preemption, daemon=True,
                             name="det-preemption").start()

    # --- reporting, off the training thread ------------------------------------------

    def report_metrics(
        self, group: MetricGroup, steps_completed: int, epoch: int, metrics: Mapping[str, float],
        *, stage: str = DEFAULT_STAGE, searched: bool = True,
    ) -> None:
        check_metrics(group, metrics)
        self._raise_refused()
        body = {"group": group, "steps_completed": int(steps_completed), "epoch": int(epoch),
                "metrics": _wire_metrics(metrics), **_stage_fields(stage, searched)}
        # a generic job has no trial: its metrics go to its allocation, kept per job
        self._queue.put(("metrics" if self.trial_id is not None else "job_metrics", body))

    def report_checkpoint(self, uuid: str, metadata: Mapping[str, Any], *,
                          stage: str = DEFAULT_STAGE, searched: bool = True) -> None:
        check_metrics("checkpoint", metadata.get("metrics") or {})
        self._raise_refused()
        body = {"uuid": uuid, "trial_id": self.trial_id,
                **{k: metadata[k] for k in ("steps_completed", "epoch", "batch", "size",
                                            "keras_backend") if k in metadata},
                "metrics": _wire_metrics(metadata.get("metrics") or {}),
                **_stage_fields(stage, searched)}
        self._queue.put(("checkpoint", body))
        self.latest_checkpoint = uuid

    def stage_checkpoints(self) -> list[dict[str, Any]]:
        if self.trial_id is None:
            return []
        rows = _retry(lambda: self.client.checkpoints(int(self.trial_id)))  # newest first
        return [{k: r[k] for k in ("uuid", "stage") if r.get(k) is not None}
                for r in sorted(rows, key=lambda r: r["created"])
                if not r.get("damaged")]  # failed verification on restore: never again

    def report_progress(self, fraction: float, *, searched: bool = True) -> None:
        # the trial's progress is its searched stage's (det_sdk.stages); the others have
        # lengths of their own
        if self.trial_id is not None and searched:
            self._queue.put(("progress", min(max(float(fraction), 0.0), 1.0)))

    def report_rows(self, rows_done: int, rows_total: int | None,
                    output: str | None = None) -> None:
        if self.info.task_type == "GENERIC":  # a trial's progress is its training's
            self._queue.put(("rows", {"rows_done": int(rows_done), "output": output,
                                      "rows_total": None if rows_total is None
                                      else int(rows_total)}))

    def alert(self, title: str, description: str, level: str) -> None:
        """To the master's webhooks (``POST /api/v1/webhooks/custom``, as Determined's
        ``core_context.alert``): the chief queues it with its reports (never blocking
        training); another rank sends it at once. Only a trial has alerts (as in
        Determined)."""
        if self.trial_id is None or self.info.experiment_id is None:
            raise StateError("alert() only works in a trial (Determined's rule): this task "
                             "is a job")
        body = {"data": {"title": title, "description": description,
                         "level": f"LOG_LEVEL_{level}"},
                "experiment_id": int(self.info.experiment_id), "trial_id": self._trial()}
        if self.writer:
            self._queue.put(("alert", body))
        else:
            self._deliver_one("alert", body)
    def report_system_metrics(self, records: list[dict[str, Any]]) -> None:
        # Bounded: while the master is away the queue holds at most _MAX_SYSTEM_PENDING
        # of these (a report a minute by default); the newest beyond are dropped, counted.
        if not self.writer or self.trial_id is None:
            return
        with self._system_lock:
            if self._system_pending >= _MAX_SYSTEM_PENDING:
                self.system_dropped += 1
                if self.system_dropped == 1:
                    log.warning("det_sdk: the master is not taking system metrics; the "
                                "profiler's reports are dropped until it does")
                return
            self._system_pending += 1
        self._queue.put(("system", records))

    def _send(self, kind: str, body: Any) -> None:
        if kind == "system":
            try:
                self.client.request("POST", f"/api/v1/trials/{self._trial()}/system-metrics",
                                    json={"records": body})
            except Exception as err:  # not worth retrying: the next report comes soon
                if not isinstance(err, (ConnectionError, OSError)):
                    log.warning("det_sdk: a system metrics report was not taken: %s", err)
            finally:
                with self._system_lock:
                    self._system_pending -= 1
            return
        if kind == "rows":
            self.client.report_job_progress(self.info.allocation_id, body)
        elif kind == "metrics":
            self.client.report_metrics(self._trial(), body)
        elif kind == "job_metrics":
            self.client.request("POST", f"/api/v1/allocations/{self.info.allocation_id}/metrics",
                                json=body)
        elif kind == "checkpoint":
            self.client.report_checkpoint(body)
        elif kind == "progress":
            self.client.report_progress(self._trial(), body)
        elif kind == "alert":
            self.client.request("POST", "/api/v1/webhooks/custom", json=body)

    def _deliver(self) -> None:
        """The report thread: it never dies. Each report is sent, retried while the
        master is unreachable (it may be restarting) or answers 5xx (a few times),
        and dropped with a log line when refused or when it cannot be sent at all;
        the reports after it go on."""
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                self._deliver_one(*item)
            except BaseException:  # even a bug here must not stop later reports
                log.exception("det_sdk: a %s report was lost", item[0])
            finally:
                self._queue.task_done()

    def _deliver_one(self, kind: str, body: Any) -> None:
        from det_sdk.client import MasterError

        delay, server_errors = 0.5, 0
        while True:
            try:
                self._send(kind, body)
                return
            except MasterError as err:
                if err.status in _INVALID_REPORT:  # what it carries cannot be stored
                    log.error("det_sdk: master refused a %s report: %s", kind, err)
                    self._refused = self._refused or ReportRefusedError(
                        f"the master refused a {kind} report as invalid (HTTP {err.status}): "
                        f"{err}; the trial fails rather than train on without its records")
                    return
                if err.status < 500:  # the trial's state or the token: retrying cannot help
                    log.warning("det_sdk: master refused a %s report: %s", kind, err)
                    return
                server_errors += 1
                if server_errors >= _SERVER_ERROR_RETRIES:
                    log.error("det_sdk: master failed a %s report %d times, dropped: %s",
                              kind, server_errors, err)
                    return
            except (ConnectionError, OSError):
                pass  # unreachable: retry until it is back
            except Exception as err:  # cannot be sent at all (e.g. not encodable)
                log.error("det_sdk: a %s report cannot be sent, dropped: %r", kind, err)
                return
            self._failures += 1
            time.sleep(delay)
            delay = min(delay * 2, 10.0)

    # --- instructions from the master -------------------------------------------------

    def _watch_preemption(self) -> None:
        while not self._closed.is_set() and not self._preempt.is_set():
            try:
                if self.client.preemption(self.info.allocation_id, timeout_seconds=20):
                    # The flag first: the training thread stops at its next batch, while
                    # the line below may wait on a full log pipe.
                    self._preempt.set()
                    # In the task's log: why a healthy trial (or job) is about to stop.
                    what = "trial" if self.info.task_type == "TRIAL" else "job"
                    print(f"det_sdk: the master asks this {what} to stop (a pause or a "
                          "preemption): it checkpoints and exits at its next stopping point",
                          file=sys.stderr, flush=True)
            except Exception:
                time.sleep(1.0)  # master away: keep training, ask again

    def should_preempt(self) -> bool:
        return self._preempt.is_set()

    def acknowledge_preemption(self) -> None:
        # Sent now, not queued: the exit that follows must find it recorded. Retried
        # while the master is away (restarting); never fatal (the stop goes on).
        try:
            _retry(lambda: self.client.acknowledge_preemption(self.info.allocation_id),
                   _WAIT_FOR_MASTER)
        except Exception as err:
            log.warning("det_sdk: could not tell the master this trial stops on its request: "
                        "%s", err)

    def _trial(self) -> int:
        """This task's trial on the master (callers have checked it has one: a generic
        job reports none of what needs it)."""
        if not isinstance(self.trial_id, int):
            raise StateError(f"this task has no trial on the master (trial {self.trial_id!r})")
        return self.trial_id

    def training_length(self) -> Length | None:
        if self.trial_id is None:
            return None
        op = _retry(lambda: self.client.searcher_operation(self._trial()), _WAIT_FOR_MASTER)
        if not op:
            return None
        return Length(**{op["unit"]: op["length"]})

    def complete_operation(self, length: Length, searcher_metric: float | None) -> Length | None:
        if self.trial_id is None or searcher_metric is None:
            return None
        # The searcher's answer decides what this process does next: wait for it
        # (retrying while the master is away, e.g. restarting).
        op = _retry(lambda: self.client.complete_operation(
            self._trial(), length.unit, length.value, searcher_metric), _WAIT_FOR_MASTER)
        if not op or op["completed"]:
            return None
        return Length(**{op["unit"]: op["length"]})

    # --- checkpoints of any trial (batch inference) ----------------------------------

    def checkpoint_for_trial(self, trial_id: int | str, best: bool = False,
                             stage: str | None = None) -> str:
        from det_sdk.client import MasterError

        try:
            return _retry(lambda: self.client.trial_checkpoint(int(trial_id), best=best,
                                                               stage=stage))["uuid"]
        except MasterError as err:
            raise CheckpointNotFoundError(str(err)) from None

    def checkpoint_path(self, uuid: str) -> Path:
        from det_sdk.client import MasterError

        check_uuid(uuid)
        try:
            return self.storage.path(uuid)
        except CheckpointNotFoundError:
            pass
        try:
            info = _retry(lambda: self.client.checkpoint(uuid))
        except MasterError as err:
            raise CheckpointNotFoundError(str(err)) from None
        if info.get("path") and Path(info["path"]).is_dir():
            return Path(info["path"])
        raise CheckpointNotFoundError(
            f"checkpoint {uuid} is not on this machine's storage ({info.get('path')})"
        )

    def close(self, timeout: float = 120.0) -> None:
        """Deliver what is queued (for up to ``timeout`` seconds), then stop; raise
        :class:`~det_sdk.errors.ReportRefusedError` if the master refused a report."""
        if self._closed.is_set():
            return
        self.stop_profiler()  # its last report queued before the queue drains
        self._closed.set()
        if self.writer:
            deadline = time.monotonic() + timeout
            done = self._queue.all_tasks_done  # notified as the queue drains: no polling
            with done:
                while self._queue.unfinished_tasks and time.monotonic() < deadline:
                    done.wait(deadline - time.monotonic())
            self._queue.put(None)
        self._raise_refused()

    def _raise_refused(self) -> None:
        """Raise, in the training thread, the refusal the report thread met (once)."""
        refused, self._refused = self._refused, None
        if refused is not None:
            raise refused

    def _close_at_exit(self) -> None:
        """At interpreter exit (a script that never closed its context): an exception
        raised here would be printed and the exit status stay 0, so a refused report
        ends the process with status 1 itself."""
        try:
            self.close()
        except ReportRefusedError as err:
            print(f"det_sdk.errors.ReportRefusedError: {err}", file=sys.stderr, flush=True)
            os._exit(1)


# The profiler's reports (det_sdk.profiler) queued at most: the rest are dropped
_MAX_SYSTEM_PENDING = 64
# Retries (about 10 minutes) for the calls a trial cannot go on without.
_WAIT_FOR_MASTER = 64
# A report the master keeps failing with 5xx is dropped after this many tries.
_SERVER_ERROR_RETRIES = 5
# Answers that say the report itself cannot be stored (invalid, too large): the trial fails.
# Others (401, 403, 404, 409) are about the trial's state or the token, not the report.
_INVALID_REPORT = (400, 413, 422)


def _stage_fields(stage: str, searched: bool) -> dict[str, Any]:
    """What a report of ``stage`` carries to the master (none for the default stage,
    searched, so a report looks as before stages).

    >>> _stage_fields("fit", True), _stage_fields("teacher", False)
    ({}, {'stage': 'teacher', 'searched': False})
    """
    fields: dict[str, Any] = dict(record_fields(stage))
    if not searched:
        fields["searched"] = False
    return fields


def _wire_metrics(metrics: Mapping[str, Any]) -> dict[str, float | str]:
    """Metrics as JSON can carry them: NaN and infinities as the strings the master reads
    back as floats (``det_sdk.wire.encode_metric``); values that are not numbers are
    logged and left out.

    >>> _wire_metrics({"loss": float("nan"), "acc": 1})
    {'loss': 'NaN', 'acc': 1.0}
    """
    from det_sdk.wire import encode_metric

    out = {}
    for k, v in metrics.items():
        try:
            out[str(k)] = encode_metric(float(v))
        except (TypeError, ValueError):
            log.warning("det_sdk: metric %r is not a number (%r); not reported", k, v)
    return out


def _retry(call: Any, attempts: int = 8) -> Any:
    """A synchronous call the process cannot go on without: retry while unreachable."""
    delay = 0.5
    for i in range(attempts):
        try:
            return call()
        except (ConnectionError, OSError):
            if i == attempts - 1:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 10.0)
    return None
