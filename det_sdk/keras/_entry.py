"""``det.keras.init()``: the engine of the backend Keras runs on, chosen here once.

Keras 3 runs on TensorFlow, JAX or PyTorch (``KERAS_BACKEND``, or ``~/.keras/keras.json``);
Keras 2 on TensorFlow. TensorFlow trains with det_sdk's TensorFlow engine
(``det_sdk.keras._init``: ``tf.data``, Horovod); JAX and PyTorch with the engine over
Keras 3's own API (:mod:`det_sdk.keras._neutral`). Only the chosen engine is imported:
on JAX or PyTorch, TensorFlow and Horovod are not.

>>> backend_name() in ("tensorflow", "jax", "torch")
True
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from det_sdk.config import ExperimentConfig, Length

__all__ = ["backend_name", "init"]


def backend_name() -> str:
    """The backend Keras runs on in this process (importing Keras, as the script does)."""
    import keras

    return str(keras.backend.backend())


def init(
    *,
    hparams: Mapping[str, Any] | None = None,
    config: str | os.PathLike[str] | Mapping[str, Any] | ExperimentConfig | None = None,
    runs_dir: str | os.PathLike[str] | None = None,
    resume: bool | int | str | None = None,
    seed: int | None = None,
    checkpoint_period: Length | Mapping[str, int] | bool = True,
    searched_stage: str | None = None,
) -> Any:
    """The context of this training (or inference) process.

    Off the cluster (no ``DET_ALLOCATION_ID`` in the environment):

    - ``hparams``: default hyperparameter values; constants of the config override
      them, and searched ones in the config need a value here.
    - ``config``: an experiment config (YAML path, mapping or parsed); ``DET_CONFIG`` names
      one when not given. Its ``data`` section is ``context.config_data``; its
      ``environment.environment_variables`` are set in ``os.environ`` here, except
      those the shell already set (the shell wins). TensorFlow has started by then:
      variables it reads at start-up (``TF_CPP_MIN_LOG_LEVEL``, ``OMP_NUM_THREADS``)
      take effect locally only from the shell.
    - ``runs_dir``: where local runs live (``DET_RUNS_DIR``, default ``./det-runs``);
      each run is ``<runs_dir>/<n>`` with metrics, TensorBoard events and checkpoints.
    - ``resume``: continue a run from its latest checkpoint: a run id, or ``"latest"``
      / ``True`` (``DET_RESUME`` works the same). The run's recorded seed is reused.
    - ``seed``: seeds Python, NumPy and the backend; else the config's
      ``reproducibility.experiment_seed``; else a random one, recorded.
    - ``checkpoint_period``: ``Length(epochs=1)`` by default (or the config's
      ``min_checkpoint_period``); ``False`` turns checkpoints off.
    - ``searched_stage``: with several ``fit`` calls (stages), the one the searcher's
      length applies to on the cluster (``context.fit(..., stage=NAME)``); default the
      first ``fit``. Named here because the searcher must know it when the first ``fit``
      starts. The other stages train their own ``epochs``.

    Example::

        import det_sdk as det
        context = det.keras.init(hparams={"learning_rate": 0.01}, config="const.yaml")
        context.training.hparams["learning_rate"]  # 0.01
    """
    name = backend_name()
    args: dict[str, Any] = {"hparams": hparams, "config": config, "runs_dir": runs_dir,
                            "resume": resume, "seed": seed,
                            "checkpoint_period": checkpoint_period,
                            "searched_stage": searched_stage}
    if name == "tensorflow":
        from det_sdk.keras._init import init as tensorflow_init

        return tensorflow_init(**args)
    from det_sdk.keras._neutral import init as neutral_init

    return neutral_init(name, **args)
