"""A log line's fields (issue 60), the time index beside a log, and a page's bounded read."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from det_sdk.errors import UsageError
from det_sdk.log_query import levels_at_or_above, parse_timestamp, record_params
from det_sdk.master import log_search
from det_sdk.master.log_clock import LogClock, TimeIndex, times_path
from det_sdk.master.log_records import Filters, parse_line


@pytest.mark.parametrize(("raw", "rank", "stdtype", "level", "text"), [
    (b"[1]<stderr>:ERROR: x\n", 1, "stderr", "LOG_LEVEL_ERROR", "x\n"),
    (b"Mon Nov 29 13:42:48 2026[0]<stdout>:hi\n", 0, "stdout", "LOG_LEVEL_INFO", "hi\n"),
    (b"[rank=3] DEBUG: [7] det_sdk.keras: y\n", 3, None, "LOG_LEVEL_DEBUG", "y\n"),
    (b"[default2]:WARNING:root:z\n", 2, None, "LOG_LEVEL_WARNING", "root:z\n"),
    (b"plain INFO: not at the start\n", None, None, "LOG_LEVEL_INFO",
     "plain INFO: not at the start\n"),
    (b"\xff\xfe bad utf-8\n", None, None, "LOG_LEVEL_INFO", "\ufffd\ufffd bad utf-8\n"),
])
def test_parse_line(raw: bytes, rank: int | None, stdtype: str | None, level: str,
                    text: str) -> None:
    line = parse_line(raw)
    assert (line.rank, line.stdtype, line.level, line.log) == (rank, stdtype, level, text)


def test_master_lines_and_default_rank() -> None:
    line = parse_line(b"det_sdk: kept 3 files\n", default_rank=0)
    assert (line.source, line.rank) == ("master", 0)


def test_filters_and_their_errors() -> None:
    assert levels_at_or_above("LOG_LEVEL_CRITICAL") == ["LOG_LEVEL_CRITICAL"]
    with pytest.raises(UsageError, match="level"):
        levels_at_or_above("LOUD")
    with pytest.raises(UsageError, match="timestamp_before"):
        parse_timestamp("noon", "timestamp_before")
    with pytest.raises(UsageError, match="search_text"):
        record_params(search_text="x" * 2000)
    assert parse_timestamp("2021-10-26T23:17:12+00:00", "t") == 1635290232.0
    f = Filters(rank_ids={1}, after=10.0, before=20.0)
    assert f.keeps(parse_line(b"[1]<stdout>:a\n"), 15.0)
    assert not f.keeps(parse_line(b"[1]<stdout>:a\n"), 20.0)
    assert not f.keeps(parse_line(b"[0]<stdout>:a\n"), 15.0)


def test_the_time_index_dates_each_line_when_the_master_first_saw_it(tmp_path: Path) -> None:
    log = tmp_path / "logs.txt"
    clock = LogClock(lambda: [log])
    log.write_bytes(b"one\n")
    clock.mark()
    first = time.time()
    time.sleep(0.05)
    with open(log, "ab") as f:
        f.write(b"two\n")
    clock.mark()
    clock.mark()  # unchanged: no record
    assert times_path(log).stat().st_size == 2 * 16
    with open(log, "ab") as f:
        f.write(b"three\n")  # not marked yet: the log's modification time
    os.utime(log, (first + 100, first + 100))
    index = TimeIndex(log)
    t1, t2, t3 = index.time_at(4), index.time_at(8), index.time_at(14)
    assert t1 <= first < t2 and t3 == first + 100
    # a new clock (a restarted master) goes on from the index's last record
    LogClock(lambda: [log]).mark()
    assert times_path(log).stat().st_size == 3 * 16


def test_one_page_reads_at_most_scan_bytes(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_search, "SCAN_BYTES", 1000)
    log = tmp_path / "logs.txt"
    log.write_bytes(b"".join(b"line %05d\n" % i for i in range(1000)) + b"partial")
    found, offset, pages = [], 0, 0
    while True:
        page = log_search.read_page(log, 1, Filters(search_text="line 00999"), offset=offset,
                                    ended=False)
        assert page["scanned"] <= 1000
        found += page["records"]
        offset, pages = page["cursor"], pages + 1
        if page["done"]:
            break
    assert [r["log"] for r in found] == ["line 00999\n"] and pages >= 11
    assert offset == 11000  # the unfinished last line waits for its newline
    page = log_search.read_page(log, 1, Filters(), offset=offset, ended=True)
    assert [r["raw"] for r in page["records"]] == ["partial"]
    back = log_search.read_page(log, 1, Filters(), order="desc", limit=2)
    assert [r["raw"] for r in back["records"]] == ["partial", "line 00999\n"]
    assert back["cursor"] == 999 * 11 and not back["done"]


def test_a_text_search_finds_what_a_line_by_line_scan_finds(tmp_path: Path) -> None:
    """The search jumps to the needle's occurrences; a long line still comes in the pieces
    a plain page cuts it into."""
    log = tmp_path / "logs.txt"
    long_line = b"x" * 100_000 + b" needle " + b"y" * 100_000 + b"\n"
    log.write_bytes(b"a needle\nnothing\n" + long_line + b"ERROR: needle twice needle\nend")
    plain = log_search.read_page(log, 1, Filters(), limit=5000)["records"]
    expected = [(r["offset"], r["raw"]) for r in plain if "needle" in r["raw"]]
    for order in ("asc", "desc"):
        page = log_search.read_page(log, 1, Filters(search_text="needle"), order=order,
                                    limit=5000)
        found = [(r["offset"], r["raw"]) for r in page["records"]]
        assert found == (expected if order == "asc" else expected[::-1])
    errors = log_search.read_page(log, 1, Filters(levels={"LOG_LEVEL_ERROR"}))
    assert [r["log"] for r in errors["records"]] == ["needle twice needle\n"]
    assert log_search.read_page(log, 1, Filters(levels={"LOG_LEVEL_CRITICAL"}))["records"] == []


def test_a_level_filter_finds_what_a_line_by_line_scan_finds(tmp_path: Path) -> None:
    """A level filter without INFO jumps to the lines holding its marks (one line with
    two marks comes once), in both orders, as a filter of every parsed line keeps them."""
    log = tmp_path / "logs.txt"
    lines = [b"INFO: a\n", b"WARNING: w1\n", b"ERROR: e1 WARNING: both\n",
             b"[rank=0] WARNING: ranked\n", b"text with ERROR: inside\n",
             b"x" * 70_000 + b" ERROR: far\n", b"WARNING:root:python's\n", b"CRITICAL: c\n"]
    log.write_bytes(b"".join(lines * 3))
    levels = {"LOG_LEVEL_WARNING", "LOG_LEVEL_ERROR"}
    plain = log_search.read_page(log, 1, Filters(), limit=5000)["records"]
    expected = [(r["offset"], r["raw"]) for r in plain if r["level"] in levels]
    assert len(expected) == 4 * 3
    for order in ("asc", "desc"):
        page = log_search.read_page(log, 1, Filters(levels=levels), order=order, limit=5000)
        found = [(r["offset"], r["raw"]) for r in page["records"]]
        assert found == (expected if order == "asc" else expected[::-1])


def test_lines_split_a_window_at_a_time_as_one_split_would(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Lines longer than a window, lines cut into pieces, a last line without its newline:
    the windows give the lines (and offsets) one split of the whole gives."""
    rng = random.Random(60)
    data = b"".join(b"y" * rng.choice([0, 5, 100, 70_000, 300_000])
                    + (b"\n" if rng.random() < 0.9 else b"") for _ in range(800)) + b"end"
    windowed = list(log_search._lines(data, 7))
    monkeypatch.setattr(log_search, "_WINDOW", len(data) + 1)
    assert windowed == list(log_search._lines(data, 7))


def test_det_trial_logs_parses_determineds_filters() -> None:
    from det_sdk.cli.log_records_cmd import filters_of
    from det_sdk.cli.main import build_parser

    args = build_parser().parse_args(
        ["t", "logs", "3", "--rank-id", "1", "--rank-id", "0", "--log-level", "ERROR",
         "--stdtype", "stderr", "--source", "task", "--timestamp-after", "2021-10-26T23:17:12Z",
         "--tail", "5", "--json"])
    assert (args.trial_id, args.tail, args.json) == (3, 5, True)
    assert filters_of(args) == {
        "rank_ids": [1, 0], "levels": ["LOG_LEVEL_ERROR", "LOG_LEVEL_CRITICAL"],
        "stdtypes": ["stderr"], "sources": ["task"],
        "timestamp_after": "2021-10-26T23:17:12.000000Z"}
