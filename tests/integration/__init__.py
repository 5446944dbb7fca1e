"""Integration tests: TensorFlow, PyTorch or the master in this process; no process
started."""
