"""The TensorFlow half of ``det.core.DistributedContext.from_tf_config``: the strategy that
fits the processes and devices, and the context that goes with it.

det.core reads ``TF_CONFIG`` (:func:`det_sdk.core.parse_tf_config`) and calls
:func:`context_and_strategy` through ``det_sdk.distributed.FRONT_BUILDERS``, so that
TensorFlow, Keras's version and Horovod's processes are this front's, and det.core imports
no front.

>>> distributed, strategy = context_and_strategy([], 0, {})
>>> distributed.size, strategy is tf.distribute.get_strategy()
(1, True)
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from det_sdk import distributed as _base
from det_sdk.core._distributed import TFWorkers, UnsupportedStrategyError, inherited_listener
from det_sdk.keras import _compat
from det_sdk.keras._horovod import HorovodProcesses
from det_sdk.ranks import horovodrun, tf_config

__all__ = ["KERAS3_MULTIWORKER_MESSAGE", "context_and_strategy"]

log = logging.getLogger("det_sdk.core")  # from_tf_config's, as before it moved here

KERAS3_MULTIWORKER_MESSAGE = (
    "det_sdk: {n} TensorFlow worker processes need MultiWorkerMirroredStrategy, which "
    "Keras 3 does not support across processes (broken upstream: keras-team/keras#20585). "
    "This Keras is {version}. Use instead: (a) horovodrun: on the cluster "
    "slots_per_trial: N runs the launcher under it, locally run "
    "horovodrun -np N --gloo python3 -m det_sdk.launch.tensorflow -- python3 train.py "
    "(DeterminedCallback then trains the N processes with det_sdk's own gradient "
    "averaging), (b) one process (MirroredStrategy still uses every local GPU), or "
    "(c) Keras 2: TensorFlow <= 2.15, or tf-keras with TF_USE_LEGACY_KERAS=1."
)


def context_and_strategy(workers: list[str], index: int,
                         env: Mapping[str, str]) -> tuple[_base.Processes, Any]:
    """The context and the ``tf.distribute.Strategy`` for this process, from ``TF_CONFIG``'s
    ``workers`` and this process's ``index`` in them (``[]``, 0 without one): see
    ``det.core.DistributedContext.from_tf_config``."""
    if len(workers) > 1:
        if not _compat.MULTI_WORKER_FIT:
            hvd = horovodrun.read(env)
            if hvd is not None and hvd.size == len(workers):
                return _horovod_workers(workers, index, env), tf.distribute.get_strategy()
            raise UnsupportedStrategyError(KERAS3_MULTIWORKER_MESSAGE.format(
                n=len(workers), version=_compat.KERAS_VERSION))
        _share_cores(workers, index)
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        return TFWorkers(workers, index, env), strategy
    if len(tf.config.list_physical_devices("GPU")) > 1:
        return _single(), tf.distribute.MirroredStrategy()
    return _single(), tf.distribute.get_strategy()


def _single() -> _base.Processes:
    return _base.SingleProcess()


def _horovod_workers(workers: list[str], index: int,
                     env: Mapping[str, str]) -> _base.Processes:
    """Keras 3 under ``horovodrun`` + the launcher: Horovod's processes, not TensorFlow's.

    ``MultiWorkerMirroredStrategy`` cannot train Keras 3 across processes, so the
    processes train as det_sdk's Horovod ones: ``DeterminedCallback`` averages the
    gradients in the model's optimizer, broadcasts rank 0's start and splits every
    batch between the processes. The strategy is TensorFlow's default one, and
    ``TF_CONFIG`` leaves this process's environment, so that a
    ``tf.distribute.MultiWorkerMirroredStrategy()`` the script makes after this is
    one process's (it would otherwise wait for the others' gRPC servers).

    The processes must see the same batches: TensorFlow's global seed (which
    ``model.fit``'s shuffle of arrays and ``tf.data``'s ``shuffle`` draw from) is
    set to one value on every process, unless the script set one already.
    """
    if env is os.environ:
        os.environ.pop(tf_config.TF_CONFIG_VAR, None)
    listener = inherited_listener(workers, index, env)
    if listener is not None:  # the launcher's, for TFWorkers' collectives: Horovod's carry them
        listener.close()
    _share_cores(workers, index)
    dist = HorovodProcesses()
    shared = dist.broadcast(int.from_bytes(os.urandom(4), "big") % 2**31
                            if dist.is_chief else None)
    from tensorflow.python.eager import context  # reading the seed, not drawing from it

    if context.global_seed() is None:
        tf.random.set_seed(shared)
    log.info("det_sdk: %d processes under horovodrun on Keras 3: DeterminedCallback trains "
             "them with det_sdk's gradient averaging (no MultiWorkerMirroredStrategy)",
             dist.size)
    return dist


def _share_cores(workers: list[str], index: int) -> None:
    """Workers on one host share its cores (each taking all oversubscribes them: measured
    0.68x of one process's throughput with 2 on 2 cores). Before the first TF op."""
    host = workers[index].rsplit(":", 1)[0]
    local = sum(1 for w in workers if w.rsplit(":", 1)[0] == host)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if not tf.config.list_physical_devices("GPU") and local > 1:
        share = max(1, (cores or 1) // local)
        tf.config.threading.set_intra_op_parallelism_threads(share)
        tf.config.threading.set_inter_op_parallelism_threads(share)
