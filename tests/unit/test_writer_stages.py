"""det_sdk.engine.writer's two stages: a checkpoint's local write, then what finishes it
(an upload and its report) in a second thread, in order, one at a time; the training
thread waits only for the write before it hands over the next."""

from __future__ import annotations

import threading
import time

import pytest

from det_sdk.engine.writer import CheckpointWriteError, CheckpointWriter


def test_the_next_write_starts_while_the_last_finish_runs_and_finishes_keep_their_order(
) -> None:
    writer = CheckpointWriter()
    log: list[str] = []
    release = threading.Event()

    def write(n: int):  # type: ignore[no-untyped-def]
        def run():  # type: ignore[no-untyped-def]
            log.append(f"write {n}")

            def finish() -> None:
                if n == 1:
                    assert release.wait(10)  # an upload that takes a while
                log.append(f"finish {n}")
            return finish
        return run

    writer.submit(write(1))
    start = time.monotonic()
    writer.submit(write(2))  # returns once write 1 is done, with finish 1 still running
    deadline = time.monotonic() + 10
    while "write 2" not in log and time.monotonic() < deadline:
        time.sleep(0.01)
    assert time.monotonic() - start < 5
    assert log == ["write 1", "write 2"] and writer.busy
    release.set()
    writer.wait()
    assert log == ["write 1", "write 2", "finish 1", "finish 2"] and not writer.busy


def test_one_finish_runs_and_one_write_waits_behind_it_the_third_submit_blocks() -> None:
    writer = CheckpointWriter()
    release = threading.Event()
    finished: list[int] = []

    def write(n: int):  # type: ignore[no-untyped-def]
        def finish() -> None:
            assert release.wait(10)
            finished.append(n)
        return lambda: finish

    writer.submit(write(1))
    writer.submit(write(2))  # write 1 done; its finish holds the publisher
    third = threading.Thread(target=writer.submit, args=(write(3),))
    third.start()
    third.join(0.5)
    assert third.is_alive()  # write 2's finish waits for finish 1, so write 2 holds on
    release.set()
    third.join(10)
    writer.wait()
    assert finished == [1, 2, 3]


def test_a_failed_finish_is_raised_at_the_next_wait_and_the_writer_goes_on() -> None:
    writer = CheckpointWriter()

    def failing() -> None:
        raise OSError("the bucket said no")

    writer.submit(lambda: failing)
    with pytest.raises(CheckpointWriteError, match="the bucket said no"):
        writer.wait()
    done: list[bool] = []
    writer.submit(lambda: (lambda: done.append(True)))
    writer.wait()
    assert done == [True]


def test_a_failed_finish_stops_the_next_submit() -> None:
    writer = CheckpointWriter()

    def failing() -> None:
        raise OSError("upload refused")

    writer.submit(lambda: failing)
    deadline = time.monotonic() + 10
    while writer.busy and time.monotonic() < deadline:  # the error is recorded by then
        time.sleep(0.01)
    ran: list[bool] = []
    with pytest.raises(CheckpointWriteError, match="upload refused"):
        writer.submit(lambda: ran.append(True))
    writer.wait()
    assert ran == []  # the training thread learnt of it before handing over another
