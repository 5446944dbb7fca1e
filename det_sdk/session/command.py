"""The session of ``det.keras.init()`` (or ``det.core.init()``) inside a command (``det
cmd run``, issue 58): a local run in the command's working directory, whose metrics also
go to the master as the command's, and that reads any trial's checkpoints from the master.

Why a local run: a command is not a trial. It has no searcher, no experiment and is never
restarted, so its fit is what ``python train.py`` makes on a laptop (``det-runs/<n>/``:
metrics, checkpoints, TensorBoard files; ``det runs list`` in the command lists it, and
``DET_RESUME`` resumes it in a later command), kept when the command ends with the rest
of its working directory. What it adds:

- each metrics report is sent to the master too (``POST /api/v1/commands/{id}/metrics``,
  with the command's task token), from a thread that never holds up training; ``det cmd
  describe`` shows each group's latest report;
- ``trial_id`` in ``load_checkpoint_model(trial_id=...)`` and
  ``core.checkpoint.select(trial_id)`` names the master's trial (a local run's id
  means nothing inside a command; ``select()`` without one is the run's own), and a
  checkpoint not in the run is looked up on the master.

>>> CommandSession.__mro__[1].__name__
'LocalSession'
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from det_sdk.session.base import MetricGroup
from det_sdk.session.local import LocalSession
from det_sdk.stages import DEFAULT_STAGE, record_fields
from det_sdk.storage import CheckpointNotFoundError, check_uuid

__all__ = ["CommandSession"]

log = logging.getLogger("det_sdk.session")

#: seconds the reports still queued at the end get to reach the master
CLOSE_TIMEOUT = 30.0


class _OwnRun(int):
    """The run's own id as the session's ``trial_id``: ``core.checkpoint.select()`` with
    no trial passes it on, and it is told from a trial id the script gives (the master's)
    by its type, not its value (run 1 and trial 1 are different things here).

    >>> isinstance(_OwnRun(1), _OwnRun), _OwnRun(1) == 1, isinstance(1, _OwnRun)
    (True, True, False)
    """


class CommandSession(LocalSession):
    """A local run inside a command; :meth:`attach` connects it to the master."""

    _client: Any = None
    _command_id: int | None = None
    _reports: queue.Queue[dict[str, Any] | None] | None = None
    _sender: threading.Thread | None = None

    def attach(self, master_url: str, token: str, command_id: int) -> None:
        """Report to, and read checkpoints from, the master at ``master_url`` as command
        ``command_id`` (its task ``token``)."""
        from det_sdk.client import MasterClient

        self._client = MasterClient(master_url, token)
        self._command_id = command_id
        self.trial_id = _OwnRun(self.run_id)
        if self.writer:
            self._reports = queue.Queue()
            self._sender = threading.Thread(target=self._send, daemon=True,
                                            name="det-command-reports")
            self._sender.start()
            atexit.register(self._drain)

    def report_metrics(
        self, group: MetricGroup, steps_completed: int, epoch: int, metrics: Mapping[str, float],
        *, stage: str = DEFAULT_STAGE, searched: bool = True,
    ) -> None:
        super().report_metrics(group, steps_completed, epoch, metrics, stage=stage,
                               searched=searched)
        if self._reports is not None:
            from det_sdk.session.master import _wire_metrics

            self._reports.put({"group": group, "steps_completed": int(steps_completed),
                               "epoch": int(epoch), "metrics": _wire_metrics(metrics),
                               **record_fields(stage)})

    def _send(self) -> None:
        """The report thread: one POST each, in order; a report the master refuses or
        that cannot reach it is logged and dropped (the run's own file has it)."""
        assert self._reports is not None
        while True:
            body = self._reports.get()
            try:
                if body is None:
                    return
                self._client.request("POST", f"/api/v1/commands/{self._command_id}/metrics",
                                     json=body)
            except Exception as err:  # never fatal: the local run keeps every report
                log.warning("det_sdk: a metrics report did not reach the master: %s", err)
            finally:
                self._reports.task_done()

    def _drain(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Wait (up to ``timeout`` seconds) for the queued reports, then stop the thread."""
        if self._reports is None or self._sender is None or not self._sender.is_alive():
            return
        self._reports.put(None)
        self._sender.join(timeout)

    def close(self) -> None:
        self._drain()
        super().close()

    # --- any trial's checkpoints, from the master ---------------------------------------

    def checkpoint_for_trial(self, trial_id: int | str, best: bool = False,
                             stage: str | None = None) -> str:
        """The master's trial ``trial_id``: its latest (``best``: best) checkpoint; the
        run's own with no trial given (``core.checkpoint.select()``)."""
        from det_sdk.client import MasterError

        if self._client is None or isinstance(trial_id, _OwnRun):  # its own run's
            return super().checkpoint_for_trial(int(trial_id), best, stage)
        try:
            return str(self._client.trial_checkpoint(int(trial_id), best=best,
                                                     stage=stage)["uuid"])
        except (MasterError, ValueError, IndexError) as err:
            raise CheckpointNotFoundError(f"trial {trial_id} on the master: {err}") from None

    def checkpoint_path(self, uuid: str) -> Path:
        """The run's own checkpoint, else the master's (where its storage is on this
        machine)."""
        from det_sdk.client import MasterError

        check_uuid(uuid)
        try:
            return super().checkpoint_path(uuid)
        except CheckpointNotFoundError:
            if self._client is None:
                raise
        try:
            info = self._client.checkpoint(uuid)
        except MasterError as err:
            raise CheckpointNotFoundError(str(err)) from None
        if info.get("path") and Path(info["path"]).is_dir():
            return Path(info["path"])
        raise CheckpointNotFoundError(f"checkpoint {uuid} is not on this machine's storage "
                                      f"({info.get('path')})")
