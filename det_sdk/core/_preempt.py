"""Being asked to stop: the core API's ``core_context.preempt``.

>>> from det_sdk.distributed import SingleProcess
>>> from det_sdk.session import Session
>>> PreemptContext(Session(), SingleProcess()).should_preempt()
False
"""

from __future__ import annotations

from det_sdk.distributed import Processes
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

    def __init__(self, session: Session, distributed: Processes) -> None:
        self._session = session
        self._dist = distributed

    def should_preempt(self, auto_ack: bool = True) -> bool:
        """True on every process when the master asked this trial to stop.

        With ``auto_ack`` (Determined's default) a True answer also acknowledges the
        request: the exit that follows is a stop, resumed on activate, even after the
        searcher's work was done. Pass ``auto_ack=False`` and call
        :meth:`acknowledge_preemption_signal` to decide later.
        """
        mine = self._session.should_preempt() if self._dist.is_chief else False
        answer = bool(self._dist.broadcast(mine)) if self._dist.size > 1 else mine
        if answer and auto_ack:
            self.acknowledge_preemption_signal()
        return answer

    def requested(self) -> bool:
        """det_sdk extension: whether the master asked this trial to stop, as this process
        knows it (not a collective, nothing acknowledged): the chief's answer is the
        master's, the others' False. For a loop that gathers its stop requests itself."""
        return self._session.should_preempt()

    def acknowledge_preemption_signal(self) -> None:
        """Say that this trial stops because it was asked to (Determined's name)."""
        if self._dist.is_chief:
            self._session.acknowledge_preemption()
