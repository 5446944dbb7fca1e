"""The root cause of a failed task (det_sdk.failure, det_sdk.launch.catch,
det_sdk.master.root_cause): parsing on captured text, the per-rank wrapper on real
processes, the bounded log read. The cluster end to end is in test_cluster_faults.py
and test_slurm.py.

This module's other half, its end-to-end tests (real processes): tests/e2e/test_failure.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from det_sdk.failure import (
    Failure,
    earliest,
    failure_from_log,
    parse_traceback,
    read_records,
    split_ranks,
    write_record,
)
from det_sdk.master.root_cause import MAX_CHARS, last_error, read_tail, record_dir

# A 2-rank horovodrun log as the local resource manager keeps it (captured, paths and
# the long Horovod lines shortened): rank 1 raised; rank 0 then failed in a collective;
# horovodrun's own traceback comes last.
HOROVOD_LOG = """\
[0]<stdout>:det_sdk: trial 4 rank 0 of 2
[1]<stdout>:det_sdk: trial 4 rank 1 of 2
[1]<stderr>:Traceback (most recent call last):
[0]<stderr>:2024-05-01 12:00:00.1: W horovod/common/operations.cc:1234] Gloo: peer closed
[1]<stderr>:  File "/data/trials/4/workdir/train.py", line 27, in <module>
[0]<stderr>:Traceback (most recent call last):
[1]<stderr>:    raise ValueError(f"bad lr {lr}")
[0]<stderr>:  File "/data/trials/4/workdir/train.py", line 29, in <module>
[1]<stderr>:ValueError: bad lr 7
[0]<stderr>:    print("rank", context.distributed.allgather(np.ones(1)))
[0]<stderr>:  File "/venv/lib/python3.11/site-packages/horovod/common/basics.py", line 9, in f
[0]<stderr>:    raise HorovodInternalError(e)
[0]<stderr>:horovod.common.exceptions.HorovodInternalError: Gloo allgather failed
Process 1 exit with status code 1.
Terminating remaining workers after failure of Process 1.
Process 0 exit with status code 1.
Traceback (most recent call last):
  File "/venv/bin/horovodrun", line 8, in <module>
    sys.exit(run_commandline())
  File "/venv/lib/python3.11/site-packages/horovod/runner/gloo_run.py", line 284, in launch_gloo
    raise RuntimeError('Horovod detected that one or more processes exited with non-zero '
RuntimeError: Horovod detected that one or more processes exited with non-zero status
Process name: 1
Exit code: 1
"""

SRUN_LOG = """\
det_sdk: Slurm job 12: 2 ranks on node1 x1, node2 x1
1: Traceback (most recent call last):
1:   File "/shared/trials/9/workdir/train.py", line 27, in <module>
0: det_sdk: rank 0 of 2 on node1 (local rank 0 of 1)
1:     raise ValueError(f"bad lr {lr}")
1: ValueError: bad lr 7
srun: error: node2: task 1: Exited with exit code 1
"""


def test_horovod_prefixes_are_stripped_and_ranks_de_interleaved() -> None:
    ranks, rest = split_ranks(HOROVOD_LOG)
    assert sorted(ranks) == [0, 1]
    assert ranks[1] == [
        "det_sdk: trial 4 rank 1 of 2",
        "Traceback (most recent call last):",
        '  File "/data/trials/4/workdir/train.py", line 27, in <module>',
        '    raise ValueError(f"bad lr {lr}")',
        "ValueError: bad lr 7",
    ]
    assert rest[0] == "Process 1 exit with status code 1."
    assert not any("<stderr>" in line for lines in ranks.values() for line in lines)


def test_the_first_ranks_exception_from_a_horovod_log_not_the_launchers() -> None:
    f = failure_from_log(HOROVOD_LOG, cwd="/data/trials/4/workdir")
    assert f is not None
    assert (f.headline(), f.rank, f.file, f.line) == ("ValueError: bad lr 7", 1, "train.py", 27)
    assert f.source == 'raise ValueError(f"bad lr {lr}")'
    assert f.summary().splitlines()[:2] == ["ValueError: bad lr 7",
                                            "  at train.py:27, in <module> (rank 1)"]


def test_the_first_ranks_exception_from_an_srun_labelled_log() -> None:
    f = failure_from_log(SRUN_LOG, cwd="/shared/trials/9/workdir")
    assert f is not None and (f.headline(), f.rank, f.where()) == (
        "ValueError: bad lr 7", 1, "at train.py:27, in <module> (rank 1)")


def test_one_process_log_its_last_traceback_and_the_users_frame() -> None:
    log = """epoch 1
Traceback (most recent call last):
  File "/w/train.py", line 3, in <module>
    context.fit(model, x=x)
  File "/w/det_sdk/keras/_context.py", line 80, in fit
    raise DetSdkError("old")
det_sdk.errors.DetSdkError: old

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/w/train.py", line 5, in <module>
    main()
  File "/w/train.py", line 9, in main
    context.fit(model, x=x)
  File "/venv/lib/python3.11/site-packages/det_sdk/keras/_context.py", line 80, in fit
    raise ConfigError("searcher.metric: 'val_nope' is not among the validation metrics")
det_sdk.errors.ConfigError: searcher.metric: 'val_nope' is not among the validation metrics
2024 W tensorflow shutting down
"""
    f = failure_from_log(log, cwd="/w")
    assert f is not None
    assert f.type == "det_sdk.errors.ConfigError"
    assert f.message.startswith("searcher.metric: 'val_nope'")
    assert (f.file, f.line, f.function) == ("train.py", 9, "main")  # not det_sdk's frame


def test_a_syntax_error_has_no_traceback_header() -> None:
    f = parse_traceback('  File "/w/train.py", line 4\n    x = (\n        ^\n'
                        "SyntaxError: '(' was never closed\n", cwd="/w")
    assert f is not None and (f.type, f.file, f.line, f.source) == (
        "SyntaxError", "train.py", 4, "x = (")


def test_no_traceback_is_none_and_huge_ones_are_bounded() -> None:
    assert parse_traceback("just output\nand more\n") is None
    deep = ["Traceback (most recent call last):"]
    deep += ['  File "/w/train.py", line 2, in f\n    f()'] * 5000
    deep += ["RecursionError: " + "x" * 100_000]
    f = parse_traceback("\n".join(deep))
    assert f is not None and f.type == "RecursionError"
    assert len(f.traceback) <= 3100 and len(f.message) <= 1000


def test_records_earliest_failure_wins(tmp_path: Path) -> None:
    write_record(tmp_path, Failure(type="HorovodInternalError", rank=0, time=20.0,
                                   exit_code=1))
    write_record(tmp_path, Failure(type="ValueError", message="bad lr 7", rank=1, time=10.0,
                                   exit_code=1))
    (tmp_path / "rank-9-1.json").write_text("{not json")  # skipped, not fatal
    records = read_records(tmp_path)
    assert len(records) == 2
    assert earliest(records).headline() == "ValueError: bad lr 7"
    assert earliest([]) is None


def test_a_failure_that_reports_a_peers_end_is_never_the_root_cause() -> None:
    """Rank 1's ValueError reached its wrapper late (a busy machine): rank 0's "Horovod has
    been shut down", timed earlier, is still only its consequence."""
    shut_down = Failure(type="tensorflow.python.framework.errors_impl.UnknownError",
                        message="Horovod has been shut down. This was caused by an exception "
                                "on one of the ranks [Op:HorovodAllgather]", rank=0, time=10.0)
    cause = Failure(type="ValueError", message="bad lr 7", rank=1, time=10.5)
    assert earliest([shut_down, cause]) is cause
    assert earliest([shut_down]) is shut_down  # alone, it is all there is
    stopped = Failure(exit_code=143, rank=0, time=9.0)  # SIGTERM, as sh -c reports it
    exited = Failure(exit_code=1, message="error: no such file: data.csv", rank=1, time=11.0)
    assert earliest([stopped, exited]) is exited
    log = ("[0]<stderr>:Traceback (most recent call last):\n"
           '[0]<stderr>:  File "/w/train.py", line 29, in <module>\n'
           "[0]<stderr>:horovod.common.exceptions.HorovodInternalError: allgather failed\n"
           "[1]<stderr>:Traceback (most recent call last):\n"
           '[1]<stderr>:  File "/w/train.py", line 27, in <module>\n'
           "[1]<stderr>:ValueError: bad lr 7\n")
    f = failure_from_log(log, cwd="/w")
    assert f is not None and (f.headline(), f.rank) == ("ValueError: bad lr 7", 1)


def test_last_error_reads_a_huge_log_by_its_tail_and_stays_bounded(tmp_path: Path) -> None:
    log = tmp_path / "logs.txt"
    with open(log, "w") as f:
        line = "x" * 999 + "\n"
        for _ in range(50_000):  # 50 MB, one line without end at the end
            f.write(line)
        f.write("y" * 5_000_000)
    start = time.perf_counter()
    text = last_error(None, log, 137, restarts=0)
    assert time.perf_counter() - start < 1.0
    assert len(text) <= MAX_CHARS
    assert text.startswith("exited with code 137 (signal SIGKILL?) after 0 restarts")
    assert len(read_tail(log)) <= 64 * 1024


def test_last_error_leads_with_the_record_then_status_and_tail(tmp_path: Path) -> None:
    workdir = tmp_path / "workdir"
    write_record(record_dir(workdir, "trial-1-ab"), Failure(
        type="ValueError", message="bad lr 7", file="train.py", line=27,
        function="<module>", source="raise ValueError(lr)", rank=1, time=1.0, exit_code=1))
    log = tmp_path / "logs.txt"
    log.write_text(HOROVOD_LOG)
    text = last_error({"id": "trial-1-ab", "workdir": str(workdir)}, log, 1, restarts=2)
    lines = text.splitlines()
    assert lines[:3] == ["ValueError: bad lr 7", "  at train.py:27, in <module> (rank 1)",
                         "    raise ValueError(lr)"]
    assert "exited with code 1 after 2 restarts; the log's last lines:" in text
    assert text.rstrip().endswith("Exit code: 1")


def test_a_record_is_plain_json(tmp_path: Path) -> None:
    path = write_record(tmp_path, Failure(type="E", rank=2, time=1.0))
    assert path.name.startswith("rank-2-") and json.loads(path.read_text())["type"] == "E"


def test_a_libraries_start_up_log_is_not_a_silent_exits_last_word() -> None:
    """A process that ends with ``os._exit(3)`` after TensorFlow's start-up lines on stderr
    said nothing of why: its record has no message (the job's log then reads "exited with
    code 3", not TF's oneDNN notice); ``sys.exit("why")``'s last line is still kept."""
    from det_sdk.launch.catch import _Tail, failure_of

    tail = _Tail()
    tail.feed(b"WARNING: All log messages before absl::InitializeLog() is called are written "
              b"to STDERR\nI0000 00:00:1795814176.051912   23265 port.cc:153] oneDNN custom "
              b"operations are on.\n")
    assert failure_of(tail, 3, "/w", 0).message == ""
    tail.feed(b"bad learning rate 7\nW1127 20:01:02.123456    12 x.cc:1] a warning\n")
    assert failure_of(tail, 1, "/w", 0).message == "bad learning rate 7"


class _Sink:
    """One file both streams are written to, as a task's log is."""

    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> int:
        self.data += data
        return len(data)

    def flush(self) -> None:
        pass


def test_the_wrapper_passes_a_printed_line_on_whole_with_stderr_between_its_pieces() -> None:
    """Under PYTHONUNBUFFERED each argument of a ``print`` is its own write: a line on
    standard error written between two of them lands after the printed line, not inside
    it (CI read "RESULT det_sdk: predictions: ...\\n3000 30 12" in a job's log); a line left
    unfinished (a prompt) is still passed on within a second."""
    import os
    import threading

    from det_sdk.launch.catch import _pump, _Stream, _Tail

    sink, tail = _Sink(), _Tail()
    (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe()
    pump = threading.Thread(target=_pump, args=({out_r: _Stream(sink),  # type: ignore[arg-type]
                                                 err_r: _Stream(sink, tail)},))  # type: ignore[arg-type]
    pump.start()
    try:
        os.write(out_w, b"RESULT")
        time.sleep(0.05)
        os.write(err_w, b"det_sdk: predictions: 3000 rows\n")
        time.sleep(0.05)
        os.write(out_w, b" 3000 30 12\nprompt> ")
        deadline = time.monotonic() + 5
        while not sink.data.endswith(b"prompt> ") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sink.data == b"det_sdk: predictions: 3000 rows\nRESULT 3000 30 12\nprompt> "
        os.write(err_w, b"Traceback (most recent")
    finally:
        os.close(out_w)
        os.close(err_w)
        pump.join(5)
    assert not pump.is_alive()
    assert sink.data.endswith(b"prompt> Traceback (most recent")
    assert [line for _, line in tail.lines] == ["det_sdk: predictions: 3000 rows",
                                               "Traceback (most recent"]

