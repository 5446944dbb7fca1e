"""``determined`` for tasks the det_sdk master runs, where Determined is not installed.

The master puts this directory on its tasks' ``PYTHONPATH`` (only when no real
``determined`` package is importable), so commands written for Determined work as
written: ``python3 -m determined.launch.wrap_rank``, ``determined.launch.horovod``,
``.torch_distributed``, ``.tensorflow``. ``import determined as det`` gets det_sdk's
names.
"""

import det_sdk as _det_sdk


def __getattr__(name: str) -> object:
    return getattr(_det_sdk, name)
