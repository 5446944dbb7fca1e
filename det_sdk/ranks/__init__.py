"""Who am I among how many: one module per launch environment, each reading that
launcher's variables into a frozen :class:`Ranks`, and :func:`which` to pick.

- :mod:`.local`: no launcher, rank 0 of 1;
- :mod:`.horovodrun`: ``HOROVOD_*`` (also the master's and its Slurm step's trials);
- :mod:`.torchrun`: ``RANK``, ``WORLD_SIZE``, ... (also ``det_sdk.launch.torch_distributed``);
- :mod:`.tf_config`: ``TF_CONFIG`` and the collective address of ``det_sdk.launch.tensorflow``;
- :mod:`.slurm`: ``SLURM_PROCID``, ... for a process ``srun`` started;
- :mod:`.mpirun`: Open MPI's ``OMPI_COMM_WORLD_*``.

This package only reads the environment (``det_sdk.env`` names these variables as the
ranks' family, which ``env.outside`` drops): the collectives over those ranks are
the fronts' (Horovod's TensorFlow ops in ``det_sdk.distributed``, torch's process group
in ``det_sdk.pytorch``) and det.core's TCP star. It imports no framework and no front.

>>> which({"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2"})
Ranks(launcher='horovodrun', rank=1, size=2, local=1/2, cross=0/1)
>>> which({}).launcher
'local'
>>> which({"RANK": "0", "WORLD_SIZE": "2", "HOROVOD_RANK": "1", "HOROVOD_SIZE": "2"},
...       among=("horovodrun", "torchrun")).launcher
'horovodrun'
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

from det_sdk.ranks import horovodrun, local, mpirun, slurm, tf_config, torchrun
from det_sdk.ranks._value import Ranks

__all__ = ["LAUNCHERS", "Ranks", "rank_hint", "which"]

#: Each launch environment's reader, by name, in the order :func:`which` tries them:
#: a launcher that starts several processes under another (the TensorFlow launcher
#: under horovodrun, horovodrun under Slurm) sets its own variables, read first.
LAUNCHERS: dict[str, Callable[[Mapping[str, str] | None], Ranks | None]] = {
    "torchrun": torchrun.read,
    "tf_config": tf_config.read,
    "horovodrun": horovodrun.read,
    "mpirun": mpirun.read,
    "slurm": slurm.read,
}


def which(environ: Mapping[str, str] | None = None,
          among: Sequence[str] = tuple(LAUNCHERS)) -> Ranks:
    """This process's ranks: the first of ``among`` (names of :data:`LAUNCHERS`) whose
    variables are set, else one process (:mod:`.local`)."""
    env = os.environ if environ is None else environ
    for name in among:
        found = LAUNCHERS[name](env)
        if found is not None:
            return found
    return local.read(env)


def rank_hint(environ: Mapping[str, str] | None = None) -> int:
    """This process's rank by the first launcher variable that holds a number (horovodrun's,
    Slurm's, Open MPI's, torchrun's), else 0: for labelling a process's output and
    failure before (or without) its ranks being read in full.

    >>> rank_hint({"SLURM_PROCID": "5", "RANK": "2"}), rank_hint({"RANK": "x"})
    (5, 0)
    """
    env = os.environ if environ is None else environ
    for var in (horovodrun.RANK_VAR, slurm.RANK_VAR, mpirun.RANK_VAR, torchrun.RANK_VAR):
        value = env.get(var, "")
        if value.isdigit():
            return int(value)
    return 0
