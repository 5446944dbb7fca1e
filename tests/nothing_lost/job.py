"""A job that writes its output relative to its working directory, as
examples/batch_inference.py does (tests/e2e/test_nothing_lost)."""

from pathlib import Path

Path("predictions.txt").write_text("7 2 1\n")
Path("samples").mkdir()
Path("samples", "epoch_1.txt").write_text("a sample\n")
print("wrote predictions.txt")
