"""What a task wrote into its working directory is kept, bounded (issue 37)."""

from __future__ import annotations

import os
from pathlib import Path

from det_sdk.master.task_files import NOT_KEPT, keep_task_files, mark_unpacked


def _workdir(tmp_path: Path) -> Path:
    work = tmp_path / "workdir"
    (work / "pkg").mkdir(parents=True)
    for rel in ("train.py", "pkg/data.csv"):
        (work / rel).write_text("unpacked")
        os.utime(work / rel, (1_000_000, 1_000_000))  # as a tar gives them: the user's
    mark_unpacked(work)
    return work


def test_new_and_changed_files_are_kept_not_the_upload(tmp_path: Path) -> None:
    work = _workdir(tmp_path)
    (work / "predictions.npy").write_bytes(b"\x93NUMPY")
    (work / "pkg" / "data.csv").write_text("changed by the task")
    (work / "__pycache__").mkdir()
    (work / "__pycache__" / "train.cpython-312.pyc").write_bytes(b"x")
    (work / "link").symlink_to("/etc/passwd")
    assert keep_task_files(work, tmp_path / "files") is None
    kept = sorted(str(p.relative_to(tmp_path / "files"))
                  for p in (tmp_path / "files").rglob("*") if p.is_file())
    assert kept == ["pkg/data.csv", "predictions.npy"]
    assert (tmp_path / "files" / "pkg" / "data.csv").read_text() == "changed by the task"


def test_over_the_limit_the_rest_is_listed_and_noted(tmp_path: Path) -> None:
    work = _workdir(tmp_path)
    (work / "small.txt").write_bytes(b"1" * 10)
    (work / "big.bin").write_bytes(b"2" * 1000)
    note = keep_task_files(work, tmp_path / "files", limit=100)
    assert note and "1 file(s) the task wrote (1000 bytes) were not kept" in note
    assert "at most 100 bytes" in note
    assert (tmp_path / "files" / "small.txt").is_file()
    assert not (tmp_path / "files" / "big.bin").exists()
    assert "big.bin\t1000" in (tmp_path / "files" / NOT_KEPT).read_text()


def test_a_directory_unpacked_by_an_older_master_keeps_nothing(tmp_path: Path) -> None:
    work = tmp_path / "workdir"
    work.mkdir()
    (work / "out.txt").write_text("x")
    assert keep_task_files(work, tmp_path / "files") is None
    assert not (tmp_path / "files").exists()


def test_kept_whole_then_marked_and_a_second_call_changes_nothing(tmp_path: Path) -> None:
    from det_sdk.master.task_files import files_kept, keep_and_clear, kept_marker

    work = _workdir(tmp_path)
    (work / "predictions.npy").write_bytes(b"\x93NUMPY")
    dest = tmp_path / "files"
    assert not files_kept(work, dest)  # ended, not yet copied: not served
    assert keep_and_clear(work, dest) is None
    assert kept_marker(dest).is_file() and not work.exists() and files_kept(work, dest)
    (dest / "predictions.npy").write_bytes(b"served")
    assert keep_and_clear(work, dest) is None  # a restart: nothing copied twice
    assert (dest / "predictions.npy").read_bytes() == b"served"


def test_remove_tree_deletes_links_never_what_they_point_at(tmp_path: Path) -> None:
    from det_sdk.storage import remove_tree

    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "sub" / "keep.txt").write_text("x")
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    for i in range(40):
        (tree / "a" / "b" / f"{i}.bin").write_bytes(b"w")
    (tree / "a" / "dirlink").symlink_to(outside / "sub")
    (tree / "filelink").symlink_to(outside / "sub" / "keep.txt")
    remove_tree(tree)
    assert not tree.exists() and (outside / "sub" / "keep.txt").read_text() == "x"
    remove_tree(tmp_path / "never-there")  # nothing to do: no error
