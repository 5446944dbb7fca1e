"""The output directory of a ``torch_batch_process`` run: files staged per checkpoint.

Files the processor writes under ``upload_path()`` go to a staging folder of the
checkpoint to come, ``<root>/.staging/<seq>/rank_<r>/``; they are moved into
``<root>/rank_<r>/`` only after progress checkpoint ``seq`` is stored. A resumed run
first finishes the moves of every staged checkpoint ``<= seq`` (rolled forward) and
deletes the staging of later ones (their batches run again): each batch's files are in
``rank_<r>/`` once, whatever the timing of the interruption.

>>> import tempfile
>>> out = OutputDir(Path(tempfile.mkdtemp()))
>>> _ = (out.staging(1, 0) / "a.txt").write_text("x")
>>> _ = (out.staging(2, 0) / "b.txt").write_text("y")
>>> out.recover(committed=1)
>>> sorted(p.name for p in (out.root / "rank_0").iterdir())
['a.txt']
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["OutputDir"]

_STAGING = ".staging"


class OutputDir:
    """``root``: ``rank_<r>/`` the committed files, ``.staging/<seq>/`` those to come."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def staging(self, seq: int, rank: int) -> Path:
        """The folder a rank's files for checkpoint ``seq`` are written to (created)."""
        path = self.root / _STAGING / f"{seq:08d}" / f"rank_{rank}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def has_staged(self, seq: int) -> bool:
        """Whether any rank wrote a file for checkpoint ``seq``."""
        top = self.root / _STAGING / f"{seq:08d}"
        return top.is_dir() and any(p.is_file() for p in top.rglob("*"))

    def commit(self, seq: int) -> None:
        """Move checkpoint ``seq``'s staged files into place (idempotent: a rename each)."""
        top = self.root / _STAGING / f"{seq:08d}"
        if not top.is_dir():
            return
        for rank_dir in sorted(top.iterdir()):
            for src in sorted(p for p in rank_dir.rglob("*") if p.is_file()):
                dst = self.root / rank_dir.name / src.relative_to(rank_dir)
                dst.parent.mkdir(parents=True, exist_ok=True)
                os.replace(src, dst)  # same filesystem: atomic, the old version replaced
        shutil.rmtree(top, ignore_errors=True)

    def finish(self) -> None:
        """Remove the (empty) staging folder once the run is done."""
        shutil.rmtree(self.root / _STAGING, ignore_errors=True)

    def recover(self, committed: int) -> None:
        """After an interruption: finish the commits ``<= committed``, drop the others."""
        top = self.root / _STAGING
        if not top.is_dir():
            return
        for seq_dir in sorted(top.iterdir()):
            seq = int(seq_dir.name) if seq_dir.name.isdigit() else None
            if seq is not None and seq <= committed:
                self.commit(seq)
            else:
                shutil.rmtree(seq_dir, ignore_errors=True)
