"""Being asked to stop: the core API's ``core_context.preempt``.

>>> from det_sdk.distributed import SingleProcess
>>> from det_sdk.session import Session
>>> PreemptContext(Session(), SingleProcess()).should_preempt()
False
"""

from __future__ import annotations

from det_sdk.distributed import DistributedContext
from det_sdk.session import Session

__all__ = ["PreemptContext"]


class PreemptContext:
    """Whether the master asks this trial to stop (pause, kill, or a higher-priority job).

    A collective: every process calls it at the same point and all get the chief's
    answer, so they stop together. Cheap: it reads a flag that a background thread
    keeps from the master's long poll. Off the cluster nothing preempts (``False``)::

        for batch in range(n):
            train_one(batch)
            if core_context.preempt.should_preempt():
                save_checkpoint(); return
    """

    def __init__(self, session: Session, distributed: DistributedContext) -> None:
        self._session = session
        self._dist = distributed

    def should_preempt(self, auto_ack: bool = True) -> bool:
        """True on every process when the master asked this trial to stop.

        ``auto_ack`` is accepted for Determined compatibility; det_sdk's master
        needs no acknowledgement (an exit with 0 after the request is the answer).
        """
        mine = self._session.should_preempt() if self._dist.is_chief else False
        return bool(self._dist.broadcast(mine)) if self._dist.size > 1 else mine
