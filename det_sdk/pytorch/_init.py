"""``det_sdk.pytorch.init``: the context of this process, for a Trial or a script.

Above the Trainer and the script-style API (it returns the latter's context, which runs
the former), so that none of the modules below it imports another in a loop.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

from det_sdk.pytorch._script import PyTorchScriptContext
from det_sdk.pytorch._trainer import TrainerError, _distributed, _seed_everything

__all__ = ["init"]


@contextlib.contextmanager
def init(*, hparams: Mapping[str, Any] | None = None, config: Any = None,
         distributed: Any = None, seed: int | None = None,
         runs_dir: str | os.PathLike[str] | None = None,
         resume: int | str | None = None,
         exp_conf: Any = None) -> Iterator[PyTorchScriptContext]:
    """A :class:`PyTorchTrialContext` for this process (Determined's ``det.pytorch.init``)::

        with det_sdk.pytorch.init(hparams={"global_batch_size": 64, "lr": 0.1}) as ctx:
            trial = MyTrial(ctx)
            Trainer(trial, ctx).fit(max_length=Epoch(2))

    Ranks come from torchrun's or horovodrun's variables (one process otherwise); on the
    cluster the hyperparameters and everything else come from the master, off it from
    ``hparams`` / ``config`` (a YAML path or mapping; ``exp_conf``, Determined's name,
    is the same) as in ``det.core.init``.
    """
    from det_sdk import core

    if exp_conf is not None:
        if config is not None:
            raise TrainerError("init: give config or exp_conf (Determined's name), not both")
        config = exp_conf

    dist = distributed if distributed is not None else _distributed()
    with core.init(distributed=dist, config=config, hparams=hparams, seed=seed,
                   runs_dir=runs_dir, resume=resume) as core_context:
        hp = dict(core_context.info.hparams or {})
        data_cfg = dict((core_context.info.config or {}).get("data") or {})
        trial_seed = int(core_context.info.trial_seed)
        _seed_everything(trial_seed + dist.rank)
        ctx = PyTorchScriptContext(core_context, hparams=hp, data_config=data_cfg)
        yield ctx
