"""det.core's constructors that need a framework build through the fronts, or through the
collectives they share (``det_sdk.distributed.FRONT_BUILDERS``): det.core imports no front
(``lint-imports``), yet a Core API script that imports only ``det.core`` gets the front's
context.

Each runs in this process, on one rank: the multi-process paths are
tests/e2e/test_core_callback.py's (TensorFlow) and tests/e2e/test_pytorch.py's (torchrun).
"""

from __future__ import annotations

import json

import pytest

import det_sdk as det
from det_sdk.distributed import FRONT_BUILDERS, front_builder
from harness.master import free_port


@pytest.mark.parametrize("launch", sorted(FRONT_BUILDERS))
def test_every_builder_is_a_function_of_its_front(launch: str) -> None:
    module = FRONT_BUILDERS[launch].partition(":")[0]
    pytest.importorskip("torch" if module.endswith("torch") else "tensorflow")
    built = front_builder(launch)
    assert callable(built)
    assert built.__module__ == module


def test_from_tf_config_gets_the_keras_fronts_context_and_strategy() -> None:
    tf = pytest.importorskip("tensorflow")
    from det_sdk.keras import _compat

    distributed, strategy = det.core.DistributedContext.from_tf_config(environ={})
    assert isinstance(distributed, det.core.DistributedContext)
    assert distributed.size == 1 and strategy is tf.distribute.get_strategy()
    if not _compat.MULTI_WORKER_FIT:  # Keras 3: the front's refusal, with its reason
        two = {"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1", "b:2"]},
                                        "task": {"type": "worker", "index": 0}})}
        with pytest.raises(det.core.UnsupportedStrategyError, match="keras-team/keras#20585"):
            det.core.DistributedContext.from_tf_config(environ=two)


def test_from_torch_distributed_gets_the_pytorch_fronts_process_group(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    import torch.distributed as tdist

    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
                        "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(free_port())}.items():
        monkeypatch.setenv(name, value)
    distributed = det.core.DistributedContext.from_torch_distributed()
    try:
        assert type(distributed).__name__ == "TorchDistributed"
        assert (distributed.rank, distributed.size) == (0, 1) and tdist.is_initialized()
        assert distributed.allgather("only") == ["only"]
    finally:
        distributed.close()
    assert not tdist.is_initialized()


def test_the_ranks_each_builder_reads_and_its_refusals() -> None:
    """The launchers' variables reach the builders through det_sdk.ranks: what each
    refuses says which variables are missing, before any process group is joined."""
    pytest.importorskip("torch")
    from det_sdk.collectives.torch import DistributedSetupError, TorchDistributed

    with pytest.raises(DistributedSetupError, match="no ranks in the environment"):
        TorchDistributed.from_env(environ={"PATH": "/bin"})
    with pytest.raises(DistributedSetupError, match="MASTER_ADDR/MASTER_PORT are not"):
        TorchDistributed.from_env(environ={"RANK": "0", "WORLD_SIZE": "2"})
    with pytest.raises(DistributedSetupError, match="HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT"):
        TorchDistributed.from_env(environ={"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2"})
    with pytest.raises(det.core.UnsupportedStrategyError, match="2 processes were started"):
        det.core.DistributedContext.from_tf_config(
            environ={"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2"})
