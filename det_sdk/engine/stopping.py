"""The processes' one decision to stop training: every front's fit asks it.

A stop is asked here and there: a SIGTERM or Ctrl-C reaches one process
(:func:`det_sdk.engine.signals.catch_stop_signals`), a PyTorch trial calls
``context.set_stop_requested(True)`` on one rank, the master asks the trial to stop
(``det experiment pause``, a kill, a preemption; only the chief hears it). Training
stops at the same batch on every process (its checkpoint is collective), so the
processes agree: :class:`StopAgreement` is that agreement, the same for ``context.fit``
(Keras), ``DeterminedCallback`` and PyTorch's ``Trainer``. Each front keeps its cadence
(when it asks: every N batches, each epoch end, spaced by batch time); which flags are
read, how they are combined, the reasons' wording and acknowledging the master's
request are here only.

>>> class Dist: size, is_chief = 1, True
>>> class Master:
...     def requested(self): return True
>>> StopAgreement(Dist(), Master(), lambda: None).decide()
'the master (pause or kill)'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from det_sdk.engine.signals import MASTER_STOP

__all__ = ["MASTER_STOP", "STOP_REQUESTED", "StopAgreement"]

#: Why a PyTorch fit stopped when the trial called ``context.set_stop_requested(True)``.
STOP_REQUESTED = "set_stop_requested"


class StopAgreement:
    """Whether to stop now, and why: the same answer on every process.

    ``dist``: the processes (``size``, ``is_chief``, ``allgather``). ``preempt``: the
    task's ``core_context.preempt`` (its ``requested()`` is read on the chief only: the
    master's request as the chief knows it, no collective). ``local_reason()``: why this
    process asks to stop (a signal's name, :data:`STOP_REQUESTED`), None when it does
    not; cheap, it is called at every decision.

    The reason agreed is the first process's, in rank order, among those that ask;
    the chief asks when a stop reached it or when the master asks (a signal it received
    wins: the user said why). One process decides without a collective; N processes
    with one allgather of (local reason, the chief's master flag, ``carry``), preceded,
    when nothing is carried, by one ``any`` of the flags that skips it when nobody asks.

    ``acknowledge``: when the chief sees the master's request at a decision, tell the
    master that the trial stops because it was asked (as ``preempt.should_preempt()``
    does), whatever reason wins. Without it the front acknowledges itself (Keras'
    ``context.fit`` does, once its checkpoint is saved, when the reason is
    :data:`MASTER_STOP`).

    >>> class Dist:
    ...     size, is_chief = 2, True
    ...     def allgather(self, row): return [row, ("SIGTERM", False, 0.2)]
    ...     def any(self, flag): return True
    >>> class Master:
    ...     def requested(self): return False
    >>> agreement = StopAgreement(Dist(), Master(), lambda: None)
    >>> agreement.decide(carry=0.1), agreement.carried
    ('SIGTERM', [0.1, 0.2])
    """

    def __init__(self, dist: Any, preempt: Any, local_reason: Callable[[], str | None],
                 *, acknowledge: bool = False) -> None:
        self.dist, self.preempt, self.local_reason = dist, preempt, local_reason
        self.acknowledge = acknowledge
        self.master = False  # the master asked, as the last decision saw
        self.carried: list[Any] = []  # every process's ``carry`` at the last decision

    def decide(self, carry: Any = None) -> str | None:
        """Why every process stops now (the same on each), None: train on.

        A collective on N processes: every process calls it at the same batch.
        ``carry``: this process's share of what the decision gathers (``carried``: every
        process's, by rank; e.g. its batch time, to space the next decision).
        """
        mine = self.local_reason()
        master = bool(self.preempt.requested()) if self.dist.is_chief else False
        if self.dist.size == 1:
            rows = [(mine, master, carry)]
        elif carry is None and not self.dist.any(mine is not None or master):
            # nobody asks (nearly every decision): one flag reduced, about 1 ms against
            # 4 for an object allgather under Horovod; the reasons only when asked
            self.master, self.carried = False, [None] * self.dist.size
            return None
        else:
            rows = self.dist.allgather((mine, master, carry))
        self.master = bool(rows[0][1])
        self.carried = [c for _, _, c in rows]
        if self.master and self.acknowledge and self.dist.is_chief:
            self.preempt.acknowledge_preemption_signal()
        reasons = [rows[0][0] or (MASTER_STOP if self.master else None)]
        reasons += [reason for reason, _, _ in rows[1:]]
        return next((r for r in reasons if r), None)
