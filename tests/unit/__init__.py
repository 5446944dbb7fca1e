"""Unit tests: no process, no TensorFlow or PyTorch, no master app (seconds)."""
