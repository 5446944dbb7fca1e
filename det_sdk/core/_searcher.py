"""How long to train: the core API's ``core_context.searcher``.

>>> from det_sdk.config import Length
>>> from det_sdk.distributed import SingleProcess
>>> from det_sdk.session import Session
>>> for op in SearcherContext(Session(), SingleProcess(), Length(epochs=3)).operations():
...     print(op.length, op.unit)
...     op.report_completed(0.25)
3 epochs
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from det_sdk.config import Length
from det_sdk.distributed import Processes
from det_sdk.errors import StateError, UsageError
from det_sdk.session import Session

__all__ = ["SearcherContext", "SearcherOperation"]


class SearcherOperation:
    """"Train to ``length`` (in ``unit``), then report the searcher metric."

    >>> op = SearcherOperation(None, Length(batches=100))
    >>> op.length, op.unit
    (100, 'batches')
    """

    def __init__(self, context: SearcherContext | None, length: Length) -> None:
        self._context = context
        self._length = length
        self._completed = False
        self._next: Length | None = None

    @property
    def length(self) -> int:
        """How far to train, in :attr:`unit`s, counted from the start of the trial."""
        return self._length.value

    @property
    def unit(self) -> str:
        """``"epochs"`` or ``"batches"``."""
        return self._length.unit

    def report_progress(self, length: float) -> None:
        """Training reached ``length`` units of this operation (chief only)."""
        if self._context is not None and self._context._dist.is_chief:
            self._context._session.report_progress(float(length) / max(self.length, 1))

    def report_completed(self, searcher_metric: float) -> None:
        """This length is trained and validated: ``searcher_metric`` goes to the searcher.

        The chief's call counts (Determined's scripts call it on the chief only; other
        processes may call it too, which changes nothing). The searcher's answer,
        shared with every process by :meth:`SearcherContext.operations`, decides
        whether another operation follows.
        """
        if self._completed:
            raise StateError("report_completed: this operation was already completed")
        self._completed = True
        ctx = self._context
        if ctx is not None and ctx._dist.is_chief:
            self._next = ctx._session.complete_operation(self._length, float(searcher_metric))


class SearcherContext:
    """The searcher's operations for this trial, one after another::

        for op in core_context.searcher.operations():
            while epochs_done < op.length:
                train_one_epoch(); epochs_done += 1
                op.report_progress(epochs_done)
            op.report_completed(validate()["val_loss"])

    On the cluster the master's searcher gives them (ASHA may lengthen a trial);
    off it there is one, the config's ``searcher.max_length`` (or ``length=`` of
    :func:`det_sdk.core.init`).
    """

    def __init__(self, session: Session, distributed: Processes,
                 local_length: Length | None = None) -> None:
        self._session = session
        self._dist = distributed
        self._local_length = local_length

    def use_local_length(self, length: Length | None) -> None:
        """det_sdk extension: off the cluster, the one length to train to when the script
        gives none (a ``TFKerasTrial``'s ``searcher.max_length``); on the cluster the
        master's searcher still decides."""
        self._local_length = length

    def current_length(self) -> Length | None:
        """The length the searcher asks for now (a collective); None: as the script says."""
        told = self._session.training_length() if self._dist.is_chief else None
        told = self._dist.broadcast(told) if self._dist.size > 1 else told
        return told or self._local_length

    def complete(self, length: Length, searcher_metric: float | None) -> Length | None:
        """``length`` is trained: the chief reports ``searcher_metric``; every process
        gets the searcher's next length, or None to stop (a collective).

        ``context.fit`` and ``DeterminedCallback`` end each operation here, as every
        process reaches it together; a script of Determined's shape uses
        :meth:`operations`, where the chief alone calls ``op.report_completed``. Other
        processes' ``searcher_metric`` is not read (give None).

        >>> from det_sdk.distributed import SingleProcess
        >>> SearcherContext(Session(), SingleProcess()).complete(Length(epochs=1), 0.5) is None
        True
        """
        nxt = self._session.complete_operation(length, searcher_metric) \
            if self._dist.is_chief else None
        return self._dist.broadcast(nxt) if self._dist.size > 1 else nxt

    def complete_from(self, length: Length, metrics: Mapping[str, Any], name: str, *,
                      among: str, hint: str) -> Length | None:
        """:meth:`complete` with the searcher's metric ``name`` taken from ``metrics`` (the
        chief's value counts). Every process holds the same metric names (averaged
        metrics), so a missing one is refused on all of them alike, none left waiting:
        a UsageError naming ``searcher.metric``, what it is ``among`` and the ``hint``.

        >>> from det_sdk.distributed import SingleProcess
        >>> SearcherContext(Session(), SingleProcess()).complete_from(
        ...     Length(epochs=1), {"val_loss": 0.5}, "val_loss", among="", hint="") is None
        True
        """
        if name not in metrics:
            raise UsageError(f"searcher.metric: {name!r} is not among {among} "
                             f"({', '.join(sorted(metrics)) or 'none'}); {hint}")
        return self.complete(length, float(metrics[name]) if self._dist.is_chief else None)

    def operations(self) -> Iterator[SearcherOperation]:
        """Each operation until the searcher says stop; the chief reports each completed.

        On N processes every one iterates (a collective after each operation): the
        chief's next operation, or the end, reaches the others.
        """
        length = self.current_length()
        while length is not None:
            op = SearcherOperation(self, length)
            yield op
            if self._dist.is_chief and not op._completed:
                raise StateError("searcher: call op.report_completed(metric) on the chief before "
                                 "asking for the next operation")
            nxt = op._next if self._dist.is_chief else None
            length = self._dist.broadcast(nxt) if self._dist.size > 1 else nxt
