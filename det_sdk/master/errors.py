"""The master's domain errors: what went wrong, in the master's terms, not HTTP's.

The lifecycle, scheduler, search and checkpoint modules raise these;
``det_sdk.master.routes.errors`` maps each kind to its HTTP status (one table,
``STATUS``), so no module below the API knows about HTTP.

>>> try:
...     raise NotFound("no trial 7")
... except RequestError as err:
...     print(type(err).__name__, err)
NotFound no trial 7
"""

from __future__ import annotations

from det_sdk.errors import DetSdkError

__all__ = [
    "STATUS",
    "Conflict",
    "Gone",
    "IllegalTransition",
    "InvalidRequest",
    "NoSpace",
    "NotFound",
    "RequestError",
]


class RequestError(DetSdkError, ValueError):
    """A request the master refuses; the subclass says why.

    ``status`` is kept for callers of the old interface (``RequestError(msg, status)``);
    new code raises a subclass.
    """

    default_status = 400

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status if status is not None else self.default_status


class InvalidRequest(RequestError):
    """The request itself is wrong (a config, a field, an archive): 400."""


class NotFound(RequestError):
    """No such experiment, trial, job, checkpoint or allocation: 404."""

    default_status = 404


class Conflict(RequestError):
    """The request clashes with the current state (pause a COMPLETED experiment, register
    another trial's checkpoint uuid): 409."""

    default_status = 409


class IllegalTransition(Conflict):
    """An event that the lifecycle table does not allow from the current state."""


class Gone(RequestError):
    """Recorded, but its files are gone (a checkpoint deleted from disk): 410."""

    default_status = 410


class NoSpace(RequestError):
    """The master's disk is full: 507."""

    default_status = 507


STATUS: dict[type[RequestError], int] = {
    InvalidRequest: 400,
    NotFound: 404,
    Conflict: 409,
    IllegalTransition: 409,
    Gone: 410,
    NoSpace: 507,
}
