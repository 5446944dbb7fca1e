"""What the master holds is printed by the CLI with control characters escaped (issue 37)."""

from __future__ import annotations

from det_sdk.cli.render import escape, table


def test_c0_del_and_c1_controls_are_written_out() -> None:
    assert escape("a\x1b[2Jb\x07c\x7fd\x9be\rf") == r"a\x1b[2Jb\x07c\x7fd\x9be\x0df"
    assert escape("line 1\n\tline 2\x1b", multiline=True) == "line 1\n\tline 2\\x1b"
    assert escape("plain names, ünïcode ✓") == "plain names, ünïcode ✓"


def test_table_cells_are_escaped_and_stay_one_line() -> None:
    out = table(["NAME"], [["a\x1b]0;x\x07\nb"]])
    assert out.splitlines() == ["NAME", r"a\x1b]0;x\x07\x0ab"]
