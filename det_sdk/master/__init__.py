"""The embedded master: one process with an HTTP API, a SQLite store and a launcher.

Start it with ``det master up`` (or ``python -m det_sdk.master --data-dir D``).
It never imports TensorFlow: trials do, in their own processes.
"""
