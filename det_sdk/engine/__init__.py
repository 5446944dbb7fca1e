"""det_sdk's training engine, framework-neutral: importing it loads no TensorFlow,
Keras, Horovod or torch. Every front (``det_sdk.keras``, ``det_sdk.pytorch``,
``det_sdk.core``) builds on these parts.

- :mod:`det_sdk.engine.writer`: the background checkpoint writer (one write at a time).
"""
