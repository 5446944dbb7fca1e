"""What the master's routers share: who is asking, the path and page parameters, the
documented error answers, and the answers that are files or pages.

>>> Principal("user").kind
'user'
"""

from __future__ import annotations

import contextlib
import gzip
import io
import logging
import os
import queue
import tarfile
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path as FilePath
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Path, Query, Request
from fastapi.responses import Response
from pydantic import TypeAdapter

from det_sdk import api
from det_sdk.errors import DetSdkError
from det_sdk.master.core import Master

__all__ = [
    "CURSOR_DOC",
    "ENDED",
    "ERROR",
    "FILES_DOC",
    "RESPONSES",
    "Cursor",
    "Dependency",
    "Id",
    "Limit",
    "Principal",
    "SessionExpired",
    "as_json",
    "auth_dependencies",
    "authenticate",
    "own_trial",
    "read_log",
    "tar_gz_response",
    "task_files",
]

log = logging.getLogger("det_sdk.master.routes")

CURSOR_DOC = "a page's `next_cursor`, unchanged; none: the first page"
Id = Annotated[int, Path(ge=0, le=api.MAX_INT)]
# A page's size and position (det_sdk.master.pages): out-of-range values are refused with
# the parameter's name, like any other invalid field.
Limit = Annotated[int, Query(ge=1, le=api.MAX_PAGE_LIMIT,
                             description="rows per page (at most "
                                         f"{api.MAX_PAGE_LIMIT})")]
Cursor = Annotated[str | None, Query(max_length=200, description=CURSOR_DOC)]

ERROR = {"model": api.ErrorBody}
ENDED = ("COMPLETED", "CANCELED", "ERROR")
FILES_DOC: dict[int | str, dict[str, Any]] = {200: {
    "content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}},
    "description": "the files a task created or changed in its working directory, as a "
                   ".tar.gz (det_sdk.master.task_files)"}}
# Documented on every route (FastAPI adds 422, which this API answers as 400).
RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {**ERROR, "description": "invalid request; `detail` names the field"},
    401: {**ERROR, "description": "missing or unknown token, or a task token whose "
                                  "process has ended"},
    403: {**ERROR, "description": "the token may not do this"},
    404: {**ERROR, "description": "no such experiment, trial, job, checkpoint or allocation"},
    409: {**ERROR, "description": "not allowed in the current state"},
    413: {**ERROR, "description": "request body over the limit"},
    507: {**ERROR, "description": "the master's disk is full"},
}


@dataclass
class Principal:
    kind: str  # "user" | "task"
    allocation: Mapping[str, Any] | None = None  # a task's: its AllocationRow
    # a user's (det_sdk.master.accounts): who, and whether an admin
    user_id: int | None = None
    username: str = ""
    admin: bool = False


class SessionExpired(DetSdkError, HTTPException, PermissionError):
    """A user token past its lifetime (``det master up --token-lifetime``, 7 days): 401
    saying so, and how to sign in again (routes outside ``/api/`` pass it on as is).
    A PermissionError by kind, as every det_sdk error keeps a builtin base.

    >>> e = SessionExpired({"username": "ann"}, 7 * 86400)
    >>> (e.status_code, isinstance(e, PermissionError), str(e) == e.detail)
    (401, True, True)
    """

    def __init__(self, user: Mapping[str, Any], lifetime: float) -> None:
        from det_sdk.durations import describe

        name = user["username"]
        super().__init__(401, f"the session of user {name!r} expired (a sign-in lasts "
                              f"{describe(lifetime)}): sign in again with "
                              f"`det user login {name}`")

    def __str__(self) -> str:  # OSError's would read the constructor's arguments
        return str(self.detail)


def authenticate(master: Master, header: str) -> Principal:
    """Who a request's ``Authorization`` header is; HTTPException 401 if nobody.

    A task token works while its allocation runs: once the process has exited, its
    token is refused (S5); it is no user session and has no lifetime of its own. A user
    token past its lifetime is refused with :class:`SessionExpired`.
    """
    if not header.lower().startswith("bearer "):
        raise HTTPException(401, "missing bearer token (Authorization: Bearer <token>)")
    token = header[7:].strip()
    user = master.token_user(token)
    if user is not None:
        return Principal("user", user_id=user["id"], username=user["username"],
                         admin=user["admin"])
    alloc = master.allocation_by_token(token)
    if alloc is None:
        expired = master.accounts.expired(token)
        if expired is not None:
            raise SessionExpired(*expired)
        raise HTTPException(401, "unknown token")
    if alloc["state"] != api.AllocationState.RUNNING.value:
        raise HTTPException(401, f"the token of allocation {alloc['id']} ended with its task")
    return Principal("task", alloc)


Dependency = Callable[..., Awaitable[Principal]]


def auth_dependencies(master: Master) -> tuple[Dependency, Dependency]:
    """The dependencies ``(principal, user)``: anyone with a valid token, the user only.

    ``async``: they only touch in-memory caches and short SQLite statements, and running
    them on the event loop saves a thread hand-off per request (reports are the hot path).
    """
    async def principal(request: Request) -> Principal:
        known = request.scope.get("state", {}).get("det_principal")
        if known is not None:
            return known  # the guard authenticated it already
        return authenticate(master, request.headers.get("authorization", ""))

    async def user(p: Principal = Depends(principal)) -> Principal:
        if p.kind != "user":
            raise HTTPException(403, "this needs a user token, not a task's")
        return p

    return principal, user


def own_trial(trial_id: int, p: Principal) -> None:
    """403 unless ``p`` is the user or the task of trial ``trial_id``."""
    if p.kind == "task" and (p.allocation or {}).get("trial_id") != trial_id:
        raise HTTPException(403, f"this task's token cannot act on trial {trial_id}")


def as_json(model: Any, value: Any = None) -> Response:
    """A page as JSON, serialized once by pydantic-core (``model`` is a model instance, or
    a TypeAdapter of ``value``). FastAPI's own path for a returned model (validate it
    again, ``jsonable_encoder``, ``json.dumps``) costs about 40 us a row: four times the
    rest of a 100-row page. The route's ``response_model`` still documents the answer.
    """
    body = model.dump_json(value) if isinstance(model, TypeAdapter) else model.model_dump_json()
    return Response(body, media_type="application/json")


class _QueueWriter(io.RawIOBase):
    """A write-only file whose bytes go, in pieces of about :data:`_PIECE`, into a
    bounded queue that the answer reads: the packing thread waits while the client is
    slow, and stops (:class:`_Gone`) once the client has gone."""

    def __init__(self, out: queue.Queue[bytes | BaseException | None],
                 gone: threading.Event) -> None:
        self.out, self.gone, self.buf = out, gone, bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self.buf += b
        if len(self.buf) >= _PIECE:
            self.flush_piece()
        return len(b)

    def flush_piece(self) -> None:
        if self.buf:
            self.put(bytes(self.buf))
            self.buf.clear()

    def put(self, item: bytes | BaseException | None) -> None:
        while not self.gone.is_set():
            try:
                self.out.put(item, timeout=0.5)
                return
            except queue.Full:
                continue
        raise _Gone


class PackingError(DetSdkError, RuntimeError):
    """A directory being streamed as a .tar.gz could not be read to its end."""


class _Gone(DetSdkError, RuntimeError):
    """The client stopped reading the answer (the packing thread's signal to stop)."""


_PIECE = 1 << 20


def tar_gz_response(path: FilePath, done: Callable[[], object] | None = None) -> Response:
    """Directory ``path`` as a .tar.gz answer, streamed as it is packed (issue 46): a
    thread packs into a queue of a few 1 MiB pieces that the answer sends, so the first
    bytes leave at once, a checkpoint of several GB costs the master neither its size on
    disk twice nor in memory, and a client's timeout measures silence, not the whole
    transfer. Level-1 gzip: weights hardly compress, and level 9 took minutes a GB. A
    failure while packing ends the answer early: the client's gzip reader sees the
    archive cut short (never a whole-looking part). ``done`` is called once the answer
    has ended (sent, failed or cut by the client): a downloaded copy is removed then."""
    from fastapi.responses import StreamingResponse

    from det_sdk.storage import OWNER_FILE

    if not path.is_dir():
        if done is not None:
            done()
        raise HTTPException(404, f"{path.name} is gone")
    pieces: queue.Queue[bytes | BaseException | None] = queue.Queue(maxsize=8)
    gone = threading.Event()

    def pack() -> None:
        writer = _QueueWriter(pieces, gone)
        try:
            # gzip by hand: tarfile's stream mode has no compresslevel before 3.12
            with gzip.GzipFile(fileobj=writer, mode="wb", compresslevel=1, mtime=0) as gz, \
                    tarfile.open(fileobj=gz, mode="w|") as tar:
                # the owner file is the master's bookkeeping, not part of the checkpoint
                tar.add(path, arcname=".", filter=lambda info: None
                        if info.name == f"./{OWNER_FILE}" else info)
            writer.flush_piece()
            writer.put(None)
        except _Gone:
            return
        except BaseException as err:
            with contextlib.suppress(_Gone):
                writer.put(err)

    def chunks() -> Iterator[bytes]:
        threading.Thread(target=pack, daemon=True, name="tar-gz-answer").start()
        try:
            while True:
                item = pieces.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    # the connection is cut (no last chunk): the client sees a transfer
                    # that broke, never an archive that looks whole
                    raise PackingError(f"packing {path} failed mid-answer: "
                                       f"{type(item).__name__}: {item}") from item
                yield item
        finally:
            gone.set()
            if done is not None:
                done()

    return StreamingResponse(chunks(), media_type="application/gzip")


def checkpoint_download(master: Master, uuid: str) -> Response:
    """Checkpoint ``uuid`` as a streamed .tar.gz, read through its experiment's storage
    (an object store's files downloaded and verified first, removed once sent): 410 when
    its files are gone, 409 when they are damaged."""
    from det_sdk.errors import CheckpointCorruptError
    from det_sdk.storage import CheckpointNotFoundError

    files = contextlib.ExitStack()
    try:
        path = files.enter_context(master.checkpoint_store.restore(uuid))
    except CheckpointNotFoundError:
        files.close()
        raise HTTPException(410, f"checkpoint {uuid} is recorded but its files are "
                            "gone") from None
    except CheckpointCorruptError as err:
        files.close()
        raise HTTPException(409, f"checkpoint {uuid} is damaged: {err}") from None
    response = tar_gz_response(path, done=files.close)
    response.headers["Content-Disposition"] = f'attachment; filename="checkpoint-{uuid}.tar.gz"'
    return response


def task_files(master: Master, kind: str, task_id: int, state: str) -> Response:
    """The files task ``task_id`` (``kind``: ``trials`` or ``jobs``) kept, as a .tar.gz;
    404 saying why when there are none; 409 while they are being copied (after the
    task ended): never a part of them."""
    path = master.files_path(kind, task_id)
    if state in ENDED and not master.files_kept(kind, task_id):
        raise HTTPException(409, f"{kind[:-1]} {task_id} has ended ({state}) and the files it "
                                 "wrote are being kept: ask again in a few seconds")
    if not path.is_dir():
        what = kind[:-1]
        raise HTTPException(404, f"{what} {task_id} kept no files: it wrote none into its "
                                 f"working directory" + ("" if state in ENDED else
                                 f", or has not ended ({state}): they are kept when it "
                                 "ends"))
    return tar_gz_response(path)


def read_log(path: Any, offset: int) -> dict[str, Any]:
    """Log text from byte ``offset``; the next offset lets a client follow the log."""
    try:
        with open(path, "rb") as f:
            # past the end: nothing (a seek beyond what the filesystem allows is EINVAL)
            offset = min(offset, os.fstat(f.fileno()).st_size)
            f.seek(offset)
            data = f.read(1 << 20)
    except (FileNotFoundError, NotADirectoryError):
        data = b""  # no log yet (or its place is taken: nothing to show either way)
    return {"text": data.decode("utf-8", errors="replace"), "offset": offset + len(data)}
