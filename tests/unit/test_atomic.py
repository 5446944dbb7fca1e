"""det_sdk.atomic.write_atomic, the one atomic-write helper (issue 24): whole contents or
the old ones, exact modes, and no temporary file left behind whatever fails."""

from __future__ import annotations

import doctest
import json
import stat
import threading
from pathlib import Path

import pytest

from det_sdk import atomic
from det_sdk.atomic import write_atomic


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_writes_then_replaces_and_leaves_only_the_file(tmp_path: Path) -> None:
    target = tmp_path / "run.json"
    assert write_atomic(target, "first\n") == target
    assert target.read_text() == "first\n"
    write_atomic(str(target), b"\x00second")  # a str path and bytes work too
    assert target.read_bytes() == b"\x00second"
    big = bytes(range(256)) * 40_000  # 10 MB: os.write may take it in parts
    write_atomic(target, big, durable=False)
    assert target.read_bytes() == big
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_mode_is_exact_and_none_follows_the_umask(tmp_path: Path) -> None:
    token = tmp_path / "credentials.json"
    token.write_text("{}")
    token.chmod(0o644)  # an earlier version's file
    write_atomic(token, '{"u": "t"}', mode=0o600)
    assert _mode(token) == 0o600 and token.read_text() == '{"u": "t"}'
    plain = tmp_path / "plain.txt"
    (tmp_path / "reference.txt").write_text("x")  # what open(path, "w") makes here
    write_atomic(plain, "x")
    assert _mode(plain) == _mode(tmp_path / "reference.txt")


def test_a_failure_leaves_the_old_contents_and_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "metrics.jsonl"
    target.write_text("old\n")
    with pytest.raises(TypeError):
        write_atomic(target, 12345)  # type: ignore[arg-type]  # fails after the temp exists
    assert target.read_text() == "old\n"
    # the rename itself fails: a directory stands where the file goes
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "inside").write_text("kept")
    with pytest.raises(IsADirectoryError):
        write_atomic(tmp_path / "taken", "new")
    assert (tmp_path / "taken" / "inside").read_text() == "kept"
    with pytest.raises(FileNotFoundError):  # no such directory: nothing made
        write_atomic(tmp_path / "missing" / "x.json", "{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl", "taken"]


def test_concurrent_writers_and_a_reader_see_only_whole_contents(tmp_path: Path) -> None:
    """Four writers rewrite one file (each with its own temporary name) while a reader
    reads it: every read is one writer's whole contents, never a mix or a truncation."""
    target = tmp_path / "master.json"
    payloads = [json.dumps({"writer": w, "pad": str(w) * 200_000}) for w in range(4)]
    write_atomic(target, payloads[0])
    stop = threading.Event()
    seen: set[str] = set()
    bad: list[str] = []

    def read() -> None:
        while not stop.is_set():
            text = target.read_text()
            if text not in payloads:
                bad.append(text[:80])
            seen.add(text)

    def write(w: int) -> None:
        for _ in range(25):
            write_atomic(target, payloads[w], durable=False)

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    reader.join()
    assert not bad, bad[:3]
    assert len(seen) >= 2  # the reader did see rewrites
    assert [p.name for p in tmp_path.iterdir()] == ["master.json"]


def test_save_token_is_owner_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A call site: the CLI's credentials file, 0600 even where an older one was 0644."""
    from det_sdk.client import load_token, save_token

    path = tmp_path / "det" / "credentials.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"http://a:1": "old"}))
    path.chmod(0o644)
    monkeypatch.setenv("DET_CREDENTIALS", str(path))
    monkeypatch.delenv("DET_USER_TOKEN", raising=False)
    save_token("http://b:2/", "tok")
    assert _mode(path) == 0o600
    assert load_token("http://b:2") == "tok" and load_token("http://a:1") == "old"
    assert [p.name for p in path.parent.iterdir()] == ["credentials.json"]


def test_module_examples() -> None:
    result = doctest.testmod(atomic)
    assert result.attempted > 0 and result.failed == 0
