"""Run a ``TFKerasTrial`` class: ``python -m det_sdk.keras.trial model_def:MNISTTrial``.

Off the cluster::

    python -m det_sdk.keras.trial model_def:MNISTTrial --config const.yaml
    horovodrun -np 2 --gloo python -m det_sdk.keras.trial model_def:MNISTTrial --config const.yaml
    DET_RESUME=latest python -m det_sdk.keras.trial model_def:MNISTTrial --config const.yaml

On the cluster the master runs the same command (``entrypoint: model_def:MNISTTrial``
in an experiment config becomes it), and the trial's config, hyperparameters and
length come from the master. Exit status 2 for a bad config or entrypoint, or a run
to resume that does not exist.
"""

from __future__ import annotations

import argparse
import json
import sys

from det_sdk.config import ConfigError
from det_sdk.engine.run import RunNotFoundError
from det_sdk.keras._trial import TrialLoadError, load_trial_class, run_trial

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit status.

    Example::

        main(["model_def:MNISTTrial", "--config", "const.yaml"])  # 0
    """
    parser = argparse.ArgumentParser(
        prog="python -m det_sdk.keras.trial",
        description="Train a TFKerasTrial class (module:Class) locally, with Horovod, or as "
                    "a cluster trial.")
    parser.add_argument("entrypoint", help="the trial class, e.g. model_def:MNISTTrial")
    parser.add_argument("--config", help="experiment config (YAML); off the cluster only "
                        "(default: DET_CONFIG)")
    parser.add_argument("--hparams", help="JSON object of hyperparameter values (for searched "
                        "ones, off the cluster)")
    parser.add_argument("--runs-dir", help="where local runs live (default: DET_RUNS_DIR or "
                        "./det-runs)")
    parser.add_argument("--resume", help="continue local run ID (or 'latest') from its latest "
                        "checkpoint")
    parser.add_argument("--context", default=".", help="directory holding the module "
                        "(default: the current directory)")
    args = parser.parse_args(argv)
    try:
        hparams = json.loads(args.hparams) if args.hparams else None
        if hparams is not None and not isinstance(hparams, dict):
            raise ConfigError("--hparams: expected a JSON object, e.g. '{\"lr\": 0.01}'")
        trial_class = load_trial_class(args.entrypoint, args.context)
        run_trial(trial_class, config=args.config, hparams=hparams, runs_dir=args.runs_dir,
                  resume=args.resume)
    except json.JSONDecodeError as err:
        print(f"{parser.prog}: error: --hparams is not valid JSON: {err}", file=sys.stderr)
        return 2
    except (ConfigError, TrialLoadError, RunNotFoundError) as err:
        print(f"{parser.prog}: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
