"""What the tests of Keras 3's JAX and PyTorch trials share, on the embedded master
(tests/e2e/test_keras_backends_cluster.py) and under Slurm (tests/e2e/test_slurm_backends.py):
the experiment config of the backend-neutral script (tests/scripts/keras_backend_cluster.py)
and reads of a trial's end and checkpoints through the real ``det`` CLI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from harness.master import Cluster, logs_on_failure, wait_for_experiment

__all__ = ["arrays", "backend_config", "checkpoints", "completed", "last_arrays"]


def backend_config(path: Path, backend: str, *, slots: int = 2,
                   max_length: dict[str, int] | None = None,
                   entrypoint: str = "python3 train.py", **data: Any) -> Path:
    """An experiment of the script on ``backend`` (``KERAS_BACKEND`` in the config's
    environment, as users set it), written to ``path``: ``slots`` slots, ``max_length``
    (one epoch by default), its seed fixed (a local run reads the same file through
    ``DET_CONFIG``), every checkpoint kept; ``data``: the script's ``data`` section."""
    cfg = {
        "name": path.stem,
        "hyperparameters": {"learning_rate": 0.01, "global_batch_size": 16},
        "searcher": {"name": "single", "metric": "val_loss",
                     "max_length": max_length or {"epochs": 1}},
        "entrypoint_script": entrypoint,
        "max_restarts": 0,
        "resources": {"slots_per_trial": slots},
        "reproducibility": {"experiment_seed": 7},
        "environment": {"environment_variables": [f"KERAS_BACKEND={backend}"]},
        "checkpoint_storage": {"save_trial_latest": 100},
        "data": data,
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


def completed(cluster: Cluster, exp: int, timeout: float) -> dict[str, Any]:
    """The experiment's one trial once it ended, asserted COMPLETED (its logs printed if
    not, or if the wait ran past ``timeout`` seconds)."""
    with logs_on_failure(cluster, exp):
        info = wait_for_experiment(cluster, exp, "the experiment", timeout=timeout)
        (trial,) = info["trials"]
        assert info["state"] == trial["state"] == "COMPLETED", trial.get("last_error")
    return dict(trial)


def checkpoints(cluster: Cluster, trial_id: int) -> list[dict[str, Any]]:
    """``det checkpoint list --trial``: the trial's checkpoints, oldest first."""
    rows = cluster.det_json("checkpoint", "list", "--trial", str(trial_id))
    return sorted(rows, key=lambda c: c["steps_completed"])


def arrays(path: Path) -> dict[str, list[Any]]:
    """A checkpoint directory's arrays by group: the model, the optimizer, each rank's
    random and metric states."""
    from det_sdk.keras._format import read_arrays

    return read_arrays(path)


def last_arrays(cluster: Cluster, trial_id: int) -> dict[str, list[Any]]:
    """The trial's last checkpoint's arrays, read from the master's checkpoint storage."""
    return arrays(Path(checkpoints(cluster, trial_id)[-1]["path"]))
