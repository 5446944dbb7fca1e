"""det_sdk's errors: what a script (or the ``det`` CLI) can catch, importable without TensorFlow.

Every exception class det_sdk defines derives from :class:`DetSdkError` and keeps a
builtin base that says what kind of error it is (``ValueError``, ``LookupError``,
``OSError``, ``RuntimeError``...), so ``except ValueError`` in a user's code still works
and ``except DetSdkError`` catches whatever det_sdk refused or could not do. The one
exception is ``det_sdk.keras._fit_run.Preempted``: control flow (leave ``fit`` after
a preemption checkpoint), caught inside ``context.fit``, never an error.

>>> issubclass(DivergenceError, DetSdkError)
True
>>> issubclass(UsageError, ValueError)
True
"""

from __future__ import annotations

__all__ = ["ArgumentTypeError", "CheckpointCorruptError", "CheckpointMismatchError",
           "CheckpointWriteError", "CollectiveMismatchError", "CollectiveTimeoutError",
           "DetSdkError", "DivergenceError", "MetricsLimitError",
           "MissingExtraError", "ReportRefusedError", "StateError", "StorageError",
           "UsageError"]


class DetSdkError(Exception):
    """Base of every error det_sdk raises (training, configs, the master, the CLI)."""


class UsageError(DetSdkError, ValueError):
    """A command or call given what it cannot act on: a missing directory, no token for
    the master, options that exclude each other. The message says which and what to do."""


class ArgumentTypeError(DetSdkError, TypeError):
    """An argument of a kind det_sdk cannot take (a number where a callable goes, a
    generator where a list is needed). The message names the argument and what it takes."""


class StateError(DetSdkError, RuntimeError):
    """A call made where or when it cannot be acted on: twice, on a process that does not
    own what it asks for, before what it depends on. The message says which and what to do."""


class CheckpointCorruptError(DetSdkError, RuntimeError):
    """A checkpoint directory whose files are missing, truncated, altered or unreadable."""


class CheckpointWriteError(DetSdkError, OSError, RuntimeError):
    """A checkpoint that could not be written: disk full, permissions, a write that made
    no progress. The background writer raises it in the training thread at the next
    checkpoint or wait (``except OSError`` and ``except RuntimeError`` both catch it)."""


class StorageError(DetSdkError, OSError):
    """The checkpoint storage (an object store's bucket, a shared folder) refused or could
    not be reached: a wrong key, a missing bucket, a bad endpoint, the server down after
    retries. The message names the storage, the config field or object concerned, and
    never a secret."""


class CheckpointMismatchError(DetSdkError, ValueError):
    """A checkpoint that cannot go into this model or this Keras (another major version)."""


class MetricsLimitError(DetSdkError, ValueError):
    """A metrics report over the master's limits (too many keys, a name too long), raised
    in the training process before anything is sent: the message names the group, the
    metric and the limit (``det_sdk.wire.check_metrics``)."""


class ReportRefusedError(DetSdkError, RuntimeError):
    """The master refused a report as invalid (HTTP 400 or 413): what it carried would be
    lost, so the trial fails with the master's reason instead of training on."""


class DivergenceError(DetSdkError, RuntimeError):
    """The processes of a distributed run hold different weights: training would be wrong."""


class CollectiveMismatchError(DetSdkError, RuntimeError):
    """Processes met in one det_sdk collective from different calls (one process called
    one more, or one fewer, than the others): the message names each process's caller."""


class CollectiveTimeoutError(DetSdkError, RuntimeError):
    """A det_sdk collective that some process did not reach within the bound
    (``DET_COLLECTIVE_TIMEOUT``): the processes took different paths. The message says
    where each process was."""


class MissingExtraError(DetSdkError, ImportError):
    """A command that needs an optional part of det_sdk that is not installed: the
    embedded master's web stack (``pip install 'det_sdk[master]'``). The message names
    the missing packages and the command that installs them."""
