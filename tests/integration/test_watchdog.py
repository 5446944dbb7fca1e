"""The collectives' watchdog (det_sdk/keras/_watchdog.py) with two thread ranks and Horovod's
own rendezvous key-value store in this process: one rank waits in a det_sdk collective
the other never reaches; the wait ends at the bound with an error naming both places.

The same with real processes (horovodrun, Horovod's shutdown): tests/e2e/test_mixed_precision.py.
"""

from __future__ import annotations

import re
import threading
import time

import pytest

from det_sdk.errors import CollectiveTimeoutError, DetSdkError, UsageError
from det_sdk.keras._watchdog import (
    _ANSWER_S,
    _POLL_S,
    DEFAULT_TIMEOUT_S,
    Watchdog,
    collective_timeout,
)

http_server = pytest.importorskip("horovod.runner.http.http_server")


def test_the_bound_is_read_and_checked() -> None:
    assert collective_timeout({}) == DEFAULT_TIMEOUT_S == 300
    assert collective_timeout({"DET_COLLECTIVE_TIMEOUT": "0"}) == 0
    for bad in ("-1", "soon", "nan"):
        with pytest.raises(UsageError, match="DET_COLLECTIVE_TIMEOUT must be a number"):
            collective_timeout({"DET_COLLECTIVE_TIMEOUT": bad})


def _in_training_step(release: threading.Event) -> None:
    release.wait(30)  # stands for rank 0 blocked in its step's allreduce


def test_a_collective_one_rank_never_reaches_ends_at_the_bound_naming_each_place() -> None:
    server = http_server.KVStoreServer(verbose=0)
    port = server.start_server()
    store = ("127.0.0.1", str(port))
    shut_down = threading.Event()  # Horovod's shutdown: every pending collective fails
    ready, outcome = threading.Barrier(2), {}

    def rank0() -> None:
        Watchdog(0, 2, timeout_s=2, store=store, shutdown=shut_down.set)
        ready.wait()
        _in_training_step(shut_down)

    def rank1() -> None:
        watchdog = Watchdog(1, 2, timeout_s=2, store=store, shutdown=shut_down.set)
        ready.wait()
        start = time.monotonic()
        try:
            with watchdog.collective("det_sdk.broadcast.7"):
                if not shut_down.wait(30):
                    return
                raise RuntimeError("Horovod has been shut down.")  # as Horovod's op fails
        except DetSdkError as err:
            outcome["error"], outcome["took"] = err, time.monotonic() - start

    threads = [threading.Thread(target=rank0), threading.Thread(target=rank1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(40)
    server.shutdown_server()
    err = outcome["error"]
    assert isinstance(err, CollectiveTimeoutError)
    # the bound, then at most a poll, the others' answers before the shutdown and a last read
    assert 2 <= outcome["took"] < 2 + _POLL_S + _ANSWER_S + 1
    text = str(err)
    assert "DET_COLLECTIVE_TIMEOUT=2 s" in text
    assert ("rank 1: waiting in det_sdk's collective det_sdk.broadcast.7, called from "
            "test_a_collective_one_rank_never_reaches") in text
    # (its innermost frames: threading's wait, then the function that waits)
    assert re.search(r"rank 0: not in a det_sdk collective: in .*_in_training_step "
                     r"\(test_watchdog\.py:\d+\).*\(its last det_sdk collective: none yet\)",
                     text), text


def test_an_error_that_is_not_horovods_shutdown_passes_through() -> None:
    watchdog = Watchdog(0, 1, timeout_s=0, store=None)
    with pytest.raises(ValueError, match="bad data"), watchdog.collective("det_sdk.allgather.1"):
        raise ValueError("bad data")
    assert "det_sdk.allgather.1 from test_an_error" in watchdog.place()
