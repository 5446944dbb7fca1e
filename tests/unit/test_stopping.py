"""The processes' one decision to stop (det_sdk.engine.stopping.StopAgreement), shared by
context.fit, DeterminedCallback and PyTorch's Trainer: which flags it reads, how it
combines them, its collectives and its acknowledgement of the master's request."""

from __future__ import annotations

from typing import Any

from det_sdk.engine.signals import MASTER_STOP
from det_sdk.engine.stopping import STOP_REQUESTED, StopAgreement


class _Ranks:
    """Rank ``rank`` of ``size``; its allgather returns ``others`` with its own value at
    its rank (the other processes' values in a real collective), and counts its calls."""

    def __init__(self, rank: int, size: int, others: list | None = None) -> None:
        self.rank, self.size, self.is_chief = rank, size, rank == 0
        self.others = others or [None] * size
        self.collectives = 0

    def allgather(self, value: Any) -> list:
        self.collectives += 1
        return [value if r == self.rank else v for r, v in enumerate(self.others)]

    def any(self, flag: bool) -> bool:
        # the others ask when their row has a reason or (the chief's) the master's flag
        self.collectives += 1
        return flag or any(v is not None and (v[0] is not None or v[1])
                           for r, v in enumerate(self.others) if r != self.rank)


class _Preempt:
    """A core context's ``preempt``: the master's request as this process knows it, and
    the acknowledgements sent."""

    def __init__(self, asked: bool) -> None:
        self.asked, self.reads, self.acks = asked, 0, 0

    def requested(self) -> bool:
        self.reads += 1
        return self.asked

    def acknowledge_preemption_signal(self) -> None:
        self.acks += 1


def _decide(rank: int, rows: list, local: str | None, asked: bool = False,
            acknowledge: bool = False) -> tuple[str | None, _Ranks, _Preempt]:
    ranks, preempt = _Ranks(rank, len(rows), rows), _Preempt(asked)
    reason = StopAgreement(ranks, preempt, lambda: local, acknowledge=acknowledge).decide()
    return reason, ranks, preempt


def test_one_process_decides_alone_a_signal_before_the_master() -> None:
    assert _decide(0, [None], None)[0] is None
    reason, ranks, preempt = _decide(0, [None], None, asked=True)
    assert reason == MASTER_STOP and ranks.collectives == 0 and preempt.reads == 1
    assert _decide(0, [None], "SIGTERM", asked=True)[0] == "SIGTERM"  # the user said why
    assert _decide(0, [None], STOP_REQUESTED)[0] == "set_stop_requested"


def test_two_processes_agree_on_the_first_rank_that_asks() -> None:
    # rank 1 got SIGTERM, the chief has nothing: both stop for SIGTERM
    chief = _decide(0, [None, ("SIGTERM", False, None)], None)
    other = _decide(1, [(None, False, None), None], "SIGTERM")
    assert chief[0] == other[0] == "SIGTERM"
    assert chief[1].collectives == other[1].collectives == 2  # the flag, then the reasons
    # the chief's own reason comes first, and the master's request is the chief's
    chief = _decide(0, [None, ("SIGINT", False, None)], None, asked=True)
    other = _decide(1, [(None, True, None), None], "SIGINT")
    assert chief[0] == other[0] == MASTER_STOP
    chief = _decide(0, [None, ("SIGINT", False, None)], "SIGTERM", asked=True)
    other = _decide(1, [("SIGTERM", True, None), None], "SIGINT")
    assert chief[0] == other[0] == "SIGTERM"
    # nobody asks (nearly every decision): train on after one reduced flag, no allgather
    chief = _decide(0, [None, (None, False, None)], None)
    assert chief[0] is None and chief[1].collectives == 1


def test_only_the_chief_reads_the_master() -> None:
    # a worker's own flag is not read (the chief's, the same on every rank, decides)
    reason, _, preempt = _decide(1, [(None, False, None), None], None, asked=True)
    assert reason is None and preempt.reads == 0


def test_the_master_request_is_acknowledged_by_the_chief_only_when_asked_to() -> None:
    # acknowledge=True (DeterminedCallback, PyTorch): whenever the chief sees it, as
    # should_preempt() does, even when a signal gives the reason
    _, _, preempt = _decide(0, [None], "SIGTERM", asked=True, acknowledge=True)
    assert preempt.acks == 1
    _, _, preempt = _decide(0, [None, (None, False, None)], None, asked=True, acknowledge=True)
    assert preempt.acks == 1
    _, _, preempt = _decide(1, [(None, True, None), None], None, acknowledge=True)
    assert preempt.acks == 0  # the worker's preempt acknowledges nothing
    # acknowledge=False (context.fit: acknowledged at the exit, once the checkpoint is saved)
    reason, _, preempt = _decide(0, [None], None, asked=True)
    assert reason == MASTER_STOP and preempt.acks == 0
    _, _, preempt = _decide(0, [None], None, asked=False, acknowledge=True)
    assert preempt.acks == 0  # nothing asked, nothing acknowledged


def test_what_each_process_carries_comes_back_to_all_by_rank() -> None:
    alone = StopAgreement(_Ranks(0, 1), _Preempt(False), lambda: None)
    assert alone.decide(carry=0.5) is None and alone.carried == [0.5]
    pair = StopAgreement(_Ranks(1, 2, [(None, True, 0.3), None]), _Preempt(False),
                         lambda: None)
    assert pair.decide(carry=0.1) == MASTER_STOP
    assert pair.carried == [0.3, 0.1] and pair.master is True
