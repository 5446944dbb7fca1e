"""End-to-end tests: real masters, horovodrun, training processes, Slurm and Chromium
(all marked slow by tests/conftest.py)."""
