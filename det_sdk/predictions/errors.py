"""What a streamed predict's output refuses, each a :class:`~det_sdk.errors.DetSdkError`.

The lowest layer of det_sdk.predictions: every other module of the package raises these.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from det_sdk.errors import DetSdkError

__all__ = ["PredictionsBusyError", "PredictionsCorruptError", "PredictionsDiskFullError",
           "PredictionsIncompleteError", "PredictionsMismatchError", "disk_full"]


class PredictionsMismatchError(DetSdkError, ValueError):
    """The output directory holds another job's predictions (another input or model)."""


class PredictionsIncompleteError(DetSdkError, RuntimeError):
    """The output directory's predictions are not all written yet."""


class PredictionsCorruptError(DetSdkError, RuntimeError):
    """A part's bytes do not match its sidecar, or a model's outputs changed shape."""


class PredictionsBusyError(PredictionsMismatchError):
    """Another live process is writing into the output directory (its lock file)."""


class PredictionsDiskFullError(DetSdkError, OSError):
    """The output directory's filesystem is full (or the user's quota spent): the part
    being written is absent, the ones before it complete; free space and run again."""


# a full disk, or a quota spent: the same remedy (free space, run again)
_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


def disk_full(err: OSError, path: Path, what: str) -> OSError:
    """``err`` as a :class:`PredictionsDiskFullError` naming ``path`` when the disk is
    full; any other ``OSError`` as it is.

    >>> disk_full(OSError(errno.ENOSPC, "full"), Path("out"), "part 3").__class__.__name__
    'PredictionsDiskFullError'
    """
    if err.errno not in _FULL:
        return err
    return PredictionsDiskFullError(
        err.errno, f"predict: the disk holding the output directory {path} is full "
        f"({os.strerror(err.errno or errno.ENOSPC)}) writing {what}; the parts written so far "
        "are complete: free space and run again with the same output= to continue")
