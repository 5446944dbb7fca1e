"""Deleting big folders without holding up the threads that answer requests.

A checkpoint or a task's files can be 20,000 files: the master deletes them off its
event loop, in a thread that pauses as it goes, after renaming them out of sight under
its lock (:func:`retire_dir`), so that they are gone from every listing at once and the
slow part happens later.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

__all__ = ["RETIRED_SUFFIX", "pause", "remove_tree", "retire_dir"]

RETIRED_SUFFIX = ".deleting"  # ``.<name>.deleting``: hidden, and found again after a crash


def pause() -> None:
    """A pause after each file of slow disk work: the interpreter is handed to the
    threads answering requests (a copy that never paused held it up to 5 ms at a time,
    on each hop of every answer; 0.1 ms a file is 5 s of 50,000)."""
    time.sleep(0.0001)


def remove_tree(path: Path) -> None:
    """:func:`shutil.rmtree` (errors ignored, links not followed) that pauses as the copy
    does, every 16 files: deleting a checkpoint of 20,000 files in the background must
    not slow the master's answers."""
    try:
        walk = list(os.walk(path, topdown=False))
    except OSError:
        return
    for n, (root, dirs, files) in enumerate(walk):
        for i, name in enumerate(files):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(root, name))
            if i % 16 == 15:
                pause()
        for name in dirs:  # links to directories are listed here and unlinked
            full = os.path.join(root, name)
            with contextlib.suppress(OSError):
                if os.path.islink(full):
                    os.unlink(full)
                else:
                    os.rmdir(full)
        if n % 16 == 15:
            pause()
    shutil.rmtree(path, ignore_errors=True)  # what the walk could not see, and the top


def retire_dir(path: Path) -> Callable[[], None]:
    """Rename folder ``path`` to ``.<name>.deleting`` beside it (fast: it is unlisted at
    once) and return what deletes it (slow: call it later, outside any lock).

    Example::

        finish = retire_dir(Path("/ckpts/8f3e...")); ...; finish()
    """
    trash = path.with_name(f".{path.name}{RETIRED_SUFFIX}")
    os.rename(path, trash)
    return partial(remove_tree, trash)
