"""The web UI's Tasks page data (``/ui/api/tasks``, issue 58): the interactive tasks the
master runs (commands, shells, TensorBoards; notebooks once they exist) in one list, a
task's log, and Kill, for a user signed in to the UI (session cookie or user token).

The kills are the API's own operations, and the permission table
(``det_sdk.master.permissions``) holds them to the task's owner or an admin exactly as
``POST /api/v1/commands/{id}/kill`` and ``/api/v1/tensorboards/{id}/kill``; each row's
``may_kill`` only tells the page whether to offer the button.

>>> task_row("shell", {"id": 3, "description": "Shell", "state": "RUNNING", "slots": 1,
...                    "created": 10.0, "started": 12.0}, (1, "admin"), 1, False)["open"]
'det shell open 3'
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import Response

from det_sdk.master.core import Master
from det_sdk.master.routes.common import Id, authenticate
from det_sdk.master.routes.tensorboards import TbId
from det_sdk.master.security import Sessions
from det_sdk.master.ui.views import read_log
from det_sdk.master.ui.web import COOKIE, UiAuth, clean, json_response

__all__ = ["MAX_TASKS", "task_row", "ui_tasks_router"]

#: the newest this many tasks are listed (a bounded answer however many ran)
MAX_TASKS = 500
# A log view opens at its last 256 KiB (a negative offset counts from the end), as the
# trials' and jobs' log views.
LOG_TAIL_OFFSET = -262144


def task_row(kind: str, rec: dict[str, Any], owner: tuple[int, str], me: int | None,
             admin: bool) -> dict[str, Any]:
    """One row of the page: a command or shell (``det_sdk.master.commands``' shape) or a
    TensorBoard (``det_sdk.master.tensorboards``' shape), with its owner ``(id, name)``
    and whether user ``me`` (an admin: ``admin``) may kill it.

    >>> task_row("tensorboard", {"id": "ab12", "description": "TensorBoard (Experiment 1)",
    ...          "state": "RUNNING", "start_time": 5.0, "url": "http://h:1/"},
    ...          (2, "bob"), 3, False)["may_kill"]
    False
    """
    slots: int | None
    if kind == "tensorboard":
        started, slots, open_ = rec.get("start_time"), 0, rec.get("url")
        logs = f"/ui/api/tensorboards/{rec['id']}/logs"
        kill = f"/ui/api/tensorboards/{rec['id']}/kill"
    else:
        started = rec.get("started") or rec.get("created")
        slots = rec.get("slots")
        # a shell is opened from a terminal (its key is its owner's): the line to paste
        open_ = f"det shell open {rec['id']}" if kind == "shell" else None
        if kind == "notebook":  # through the master's proxy, once JupyterLab listens
            open_ = rec.get("service_address")
        logs = f"/ui/api/commands/{rec['id']}/logs"
        kill = f"/ui/api/commands/{rec['id']}/kill"
    return {"kind": kind, "id": str(rec["id"]), "description": rec.get("description") or "",
            "owner": owner[1], "owner_id": owner[0], "state": rec.get("state"),
            "slots": slots, "started": started, "open": open_, "logs": logs, "kill": kill,
            "may_kill": admin or owner[0] == me}


def ui_tasks_router(master: Master, sessions: Sessions) -> APIRouter:
    """The Tasks page's routes over ``master``, for a user signed in with one of
    ``sessions`` (or holding a user token)."""
    router = APIRouter(prefix="/ui/api", include_in_schema=False)
    auth = UiAuth(master, sessions)

    def caller(request: Request) -> tuple[int | None, bool]:
        """The signed-in user's (id, admin), to say which rows they may kill."""
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            p = authenticate(master, header)
            return p.user_id, p.admin
        user = sessions.user_of(request.cookies.get(COOKIE))
        if user is None:
            raise HTTPException(401, "sign in at /ui/signin (det ui prints a link)")
        return user["id"], bool(user["admin"])

    @router.get("/tasks")
    def tasks(request: Request) -> Response:
        """Every command, shell and TensorBoard, the newest first (:data:`MAX_TASKS`)."""
        auth.user(request)
        me, admin = caller(request)
        rows = []
        # one source per kind; notebooks (issue 58, item 2) join here as
        # ("notebook", master.notebooks...) once the master runs them
        for kind, recs in (("command", master.commands.every()),
                           ("shell", master.commands.every("shell")),
                           ("notebook", master.notebooks.every()),
                           ("tensorboard", master.tensorboards.list())):
            for rec in recs:
                owner = master.accounts.owner(rec.get("user_id"))
                rows.append(task_row(kind, rec, owner, me, admin))
        rows.sort(key=lambda r: r["started"] or 0, reverse=True)
        return json_response(request, clean({"tasks": rows[:MAX_TASKS],
                                             "total": len(rows)}))

    @router.get("/commands/{cmd_id}/logs")
    def command_logs(cmd_id: Id, request: Request, offset: int = LOG_TAIL_OFFSET) -> Response:
        """A command's (or shell's) log, as the log view reads a job's."""
        auth.user(request)
        master.commands.get(cmd_id)  # 404 for none such
        return json_response(request, read_log(master.commands.logs_path(cmd_id), offset))

    @router.post("/commands/{cmd_id}/kill")
    def kill_command(cmd_id: Id, request: Request) -> dict[str, str]:
        """Kill a command or shell (the API's ``kill``), behind the UI's action header."""
        auth.action(request)
        return {"state": master.commands.kill(cmd_id)["state"]}

    @router.get("/tensorboards/{tb_id}/logs")
    def tensorboard_logs(tb_id: TbId, request: Request,
                         offset: int = LOG_TAIL_OFFSET) -> Response:
        auth.user(request)
        rec = master.tensorboards.get(tb_id)
        return json_response(request, read_log(master.tensorboards.log_path(rec["id"]),
                                                offset))

    @router.post("/tensorboards/{tb_id}/kill")
    def kill_tensorboard(tb_id: TbId, request: Request) -> dict[str, str]:
        auth.action(request)
        return {"state": master.tensorboards.kill(tb_id)["state"]}

    return router
