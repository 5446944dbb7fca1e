"""Determined's core API on det_sdk: ``det.core.init()`` and one context per concern.

For scripts that call ``model.fit`` themselves (with
:class:`det_sdk.keras.DeterminedCallback`) or train without Keras. Importing this
package does not import TensorFlow (only ``DistributedContext.from_tf_config`` does)::

    import det_sdk as det

    distributed, strategy = det.core.DistributedContext.from_tf_config()
    with det.core.init(distributed=distributed) as core_context:
        core_context.distributed.rank            # 0 .. size-1
        core_context.train.report_training_metrics(steps_completed=10, metrics={"loss": 1.0})
        core_context.preempt.should_preempt()    # the master asks this trial to stop
        core_context.info.latest_checkpoint      # where to resume from, or None
"""

from det_sdk.core._checkpoint import CheckpointContext
from det_sdk.core._context import Context, init
from det_sdk.core._distributed import (
    DistributedContext,
    TFWorkers,
    UnsupportedStrategyError,
    parse_tf_config,
)
from det_sdk.core._preempt import PreemptContext
from det_sdk.core._searcher import SearcherContext, SearcherOperation
from det_sdk.core._train import TrainContext

__all__ = [
    "CheckpointContext",
    "Context",
    "DistributedContext",
    "PreemptContext",
    "SearcherContext",
    "SearcherOperation",
    "TFWorkers",
    "TrainContext",
    "UnsupportedStrategyError",
    "init",
    "parse_tf_config",
]
