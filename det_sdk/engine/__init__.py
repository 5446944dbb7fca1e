"""det_sdk's training engine, framework-neutral: importing it loads no TensorFlow,
Keras, Horovod or torch. Every front (``det_sdk.keras``, ``det_sdk.pytorch``,
``det_sdk.core``) builds on these parts.

- :mod:`det_sdk.engine.run`: ``open_run``, the one reader of the environment and the
  config: the seed, the hyperparameters, the session (a local run or the master).
- :mod:`det_sdk.engine.policy`: ``TrainingPolicy``, what ``init()`` decided about
  checkpoint, validation and report periods.
- :mod:`det_sdk.engine.position`: ``Position``, where training is, as checkpoints
  record it.
- :mod:`det_sdk.engine.signals`: ``catch_stop_signals``, SIGTERM and Ctrl-C as a request
  to checkpoint and stop.
- :mod:`det_sdk.engine.stopping`: ``StopAgreement``, the processes' one decision to stop
  (a signal, ``set_stop_requested``, the master's request), for every front.
- :mod:`det_sdk.engine.writer`: the background checkpoint writer (one write at a time).
"""
