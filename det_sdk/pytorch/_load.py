"""Rebuild a trained PyTorchTrial from a checkpoint directory (Determined's
``load_trial_from_checkpoint_path`` and ``CheckpointLoadContext``), outside any training.

::

    path = client.get_checkpoint(uuid).download("ckpt")
    trial = det_sdk.pytorch.load_trial_from_checkpoint_path(
        path, trial_class=MNistTrial, trial_kwargs={"hparams": hparams})
    trial.model.eval()
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from det_sdk.errors import DetSdkError
from det_sdk.pytorch._script import PyTorchScriptContext

__all__ = ["CheckpointLoadContext", "load_trial_from_checkpoint_path"]


class CheckpointLoadError(DetSdkError, ValueError):
    """The checkpoint directory cannot give back its trial."""


def _offline_core(hparams: dict[str, Any], config: dict[str, Any]) -> Any:
    """What a context reads of ``det.core`` (one process, no master, no run directory)."""
    from det_sdk.distributed import SingleProcess

    info = SimpleNamespace(hparams=hparams, config=config, trial_seed=0, master_url=None,
                           latest_checkpoint=None,
                           trial=SimpleNamespace(trial_id=0, hparams=hparams))
    return SimpleNamespace(distributed=SingleProcess(), info=info)


class CheckpointLoadContext(PyTorchScriptContext):
    """A context for building a trial to load weights into, not to train: one process, no
    master, nothing reported.

    >>> CheckpointLoadContext(hparams={"lr": 0.1}).get_hparam("lr")
    0.1
    """

    def __init__(self, hparams: dict[str, Any] | None = None,
                 exp_conf: dict[str, Any] | None = None) -> None:
        super().__init__(_offline_core(dict(hparams or {}), dict(exp_conf or {})),
                         hparams=dict(hparams or {}),
                         data_config=(exp_conf or {}).get("data") or {})


def _import_trial(spec: str) -> type:
    module, _, qualname = spec.partition(":")
    if module == "__main__" or not qualname:
        raise CheckpointLoadError(
            f"the checkpoint's trial class {spec!r} was defined in the training script "
            f"itself: pass trial_class=YourTrial")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def load_trial_from_checkpoint_path(path: str | os.PathLike[str], trial_class: type | None = None,
                                    trial_kwargs: dict[str, Any] | None = None,
                                    torch_load_kwargs: dict[str, Any] | None = None,
                                    **kwargs: Any) -> Any:
    """The trial of a Trainer checkpoint directory, built with a
    :class:`CheckpointLoadContext` (the checkpoint's hyperparameters) and its models'
    weights loaded. ``trial_class`` defaults to the class the checkpoint names (importable
    modules only); ``trial_kwargs`` are passed after the context (e.g. ``hparams=``).
    """
    from det_sdk.pytorch._trainer import STATE_FILE, _unwrap, load_state

    if kwargs and torch_load_kwargs:
        raise CheckpointLoadError("load_trial_from_checkpoint_path: give torch_load_kwargs "
                                  "or **kwargs (Determined's deprecated form), not both")
    ckpt = Path(path)
    if not (ckpt / STATE_FILE).is_file():
        raise CheckpointLoadError(f"{ckpt}: no {STATE_FILE}; not a det_sdk.pytorch Trainer "
                                  f"checkpoint (det checkpoint download it first)")
    meta_file = ckpt / "metadata.json"
    meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
    cls = trial_class or _import_trial(str(meta.get("trial_cls_spec") or ""))
    context = CheckpointLoadContext(hparams=meta.get("hparams") or {})
    trial = cls(context, **(trial_kwargs or {}))
    state = load_state(ckpt)  # weights_only: torch_load_kwargs cannot widen that
    if len(context.models) != len(state["models_state_dict"]):
        raise CheckpointLoadError(f"{ckpt}: the checkpoint has {len(state['models_state_dict'])}"
                                  f" model(s), {cls.__name__} wrapped {len(context.models)}")
    for model, weights in zip(context.models, state["models_state_dict"]):
        _unwrap(model).load_state_dict(weights)
    return trial
