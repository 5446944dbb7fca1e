"""Launchers for entrypoints: ``python3 -m det_sdk.launch.tensorflow -- python3 train.py``."""
