"""What the tests and the benchmarks share: a real master (``harness.master``), a history
written into its database (``harness.history``), headless Chromium (``harness.browser``),
a small generated MNIST-shaped data set (``harness.mnist``) and real handwritten digits
in MNIST's shape (``harness.digits``).

Not part of det_sdk (not installed with it): the repository's root must be on
``sys.path`` (pytest puts it there; the benchmarks under ``scripts/bench/`` do it
themselves).
"""
