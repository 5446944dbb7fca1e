"""Run a ``module:Class`` trial, whatever its framework: ``python -m det_sdk.launch.trial``.

The master turns ``entrypoint: model_def:MNistTrial`` into this command
(:data:`det_sdk.config.TRIAL_RUNNER`). It imports the module (which imports its own
framework), then dispatches on the class:

- a ``det_sdk.pytorch.PyTorchTrial``, or a class of the seed tutorial's shape
  (``build_model``, ``optimizer``, ``train_batch``, ``evaluate_batch``, and the
  ``build_*_data_loader`` pair), trains with ``det_sdk.pytorch.Trainer``;
- anything else goes to the TFKerasTrial runner (``det_sdk.keras.trial``), which
  accepts a ``TFKerasTrial`` or explains what it expected.

Off the cluster the same command trains locally::

    python -m det_sdk.launch.trial model_def:MNistTrial --config const.yaml
    python -m det_sdk.launch.torch_distributed --nproc-per-node 2 \\
        python -m det_sdk.launch.trial model_def:MNistTrial --config const.yaml
    DET_RESUME=latest python -m det_sdk.launch.trial model_def:MNistTrial --config const.yaml

Exit status 2 for a bad entrypoint or config.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Any

from det_sdk.errors import UsageError

__all__ = ["is_pytorch_trial", "main"]

_SEED_METHODS = ("build_model", "optimizer", "train_batch", "evaluate_batch",
                 "build_training_data_loader", "build_validation_data_loader")


def is_pytorch_trial(cls: Any) -> bool:
    """True for a ``det_sdk.pytorch.PyTorchTrial`` or a class of the seed tutorial's shape.

    Imports no framework: a class whose module did not load ``det_sdk.pytorch`` is not one.
    """
    mod = sys.modules.get("det_sdk.pytorch")
    if mod is not None and isinstance(cls, type) and issubclass(cls, mod.PyTorchTrial):
        return True
    return isinstance(cls, type) and "torch" in sys.modules and all(
        callable(getattr(cls, m, None)) for m in _SEED_METHODS)


def _load(spec: str, directory: str) -> Any:
    module_name, sep, class_name = spec.partition(":")
    if not sep or not module_name or not class_name:
        raise _LoadError(f"entrypoint {spec!r}: expected module:Class, e.g. model_def:MNistTrial")
    where = str(Path(directory).resolve())
    if where not in sys.path:
        sys.path.insert(0, where)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name not in (module_name, module_name.split(".")[0]):
            raise
        raise _LoadError(f"entrypoint {spec!r}: no module {module_name!r} in {where}") from None
    cls = getattr(module, class_name, None)
    if cls is None:
        raise _LoadError(f"entrypoint {spec!r}: module {module_name!r} has no {class_name!r}")
    return cls


class _LoadError(UsageError):
    """The entrypoint names no loadable module:Class."""


def _length(cfg: Any, name: str) -> Any:
    from det_sdk import pytorch

    value = getattr(cfg, name, None) if cfg is not None else None
    if value is None:
        return None
    return pytorch.Epoch(value.value) if value.unit == "epochs" else pytorch.Batch(value.value)


def run_pytorch_trial(cls: type, *, config: str | None = None,
                      hparams: dict[str, Any] | None = None, runs_dir: str | None = None,
                      resume: str | None = None) -> None:
    """Train ``cls`` with the Trainer: length, validation and checkpoint periods from the
    config (the master's on the cluster)."""
    from det_sdk import pytorch
    from det_sdk.config import parse_experiment_config

    with pytorch.init(config=config, hparams=hparams, runs_dir=runs_dir, resume=resume) as ctx:
        raw = ctx._core.info.config or {}
        cfg = parse_experiment_config(raw) if raw else None
        trial = cls(ctx)
        pytorch.Trainer(trial, ctx).fit(
            validation_period=_length(cfg, "min_validation_period"),
            checkpoint_period=_length(cfg, "min_checkpoint_period"))


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m det_sdk.launch.trial",
        description="Train a trial class (module:Class: PyTorchTrial or TFKerasTrial) locally, "
                    "under a launcher, or as a cluster trial.")
    parser.add_argument("entrypoint", help="the trial class, e.g. model_def:MNistTrial")
    parser.add_argument("--config", help="experiment config (YAML); off the cluster only")
    parser.add_argument("--hparams", help="JSON object of hyperparameter values")
    parser.add_argument("--runs-dir", help="where local runs live (default: ./det-runs)")
    parser.add_argument("--resume", help="continue local run ID (or 'latest')")
    parser.add_argument("--context", default=".", help="directory holding the module")
    args = parser.parse_args(argv)
    raw_argv = list(sys.argv[1:] if argv is None else argv)
    try:
        cls = _load(args.entrypoint, args.context)
    except _LoadError as err:
        print(f"{parser.prog}: error: {err}", file=sys.stderr)
        return 2
    if not is_pytorch_trial(cls):
        from det_sdk.keras import trial as keras_trial

        return keras_trial.main(raw_argv)
    from det_sdk.config import ConfigError
    from det_sdk.engine.run import RunNotFoundError

    try:
        hparams = json.loads(args.hparams) if args.hparams else None
        if hparams is not None and not isinstance(hparams, dict):
            raise ConfigError("--hparams: expected a JSON object, e.g. '{\"lr\": 0.01}'")
        run_pytorch_trial(cls, config=args.config, hparams=hparams, runs_dir=args.runs_dir,
                          resume=args.resume)
    except json.JSONDecodeError as err:
        print(f"{parser.prog}: error: --hparams is not valid JSON: {err}", file=sys.stderr)
        return 2
    except (ConfigError, RunNotFoundError) as err:
        print(f"{parser.prog}: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
