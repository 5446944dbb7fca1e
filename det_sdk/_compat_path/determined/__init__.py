"""``determined`` for tasks the det_sdk master runs, where Determined is not installed.

The master puts this directory on its tasks' ``PYTHONPATH`` (only when no real
``determined`` package is importable), so scripts and commands written for Determined
work as written. Off the cluster, put it on ``PYTHONPATH`` yourself
(docs/migrating.md, "The determined package").

- ``import determined as det`` gets det_sdk's names (``det.core``, ``det.pytorch``,
  ``det.get_cluster_info``, ``det.LOG_FORMAT``...);
- the module paths of Determined 0.38 that det_sdk implements import under their
  Determined names and ARE det_sdk's modules (``import determined.core``,
  ``from determined.pytorch import DataLoader, samplers``, ``from determined.experimental
  import client``, ``determined.keras``): one class, whichever name imported it;
- ``python3 -m determined.launch.wrap_rank`` (``.horovod``, ``.torch_distributed``,
  ``.tensorflow``) runs det_sdk's launchers (the files under ``launch/``);
- any other ``determined.*`` module raises :class:`NotInDetSdk` (an ``ImportError``)
  naming the page that says what det_sdk has instead.
"""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

import det_sdk as _det_sdk
from det_sdk.errors import DetSdkError

#: the page listing what of Determined det_sdk implements
STATUS_PAGE = "docs/determined-compat.md"

#: Determined's packages det_sdk implements (their public submodules included): each
#: ``determined.X...`` is ``det_sdk.X...``
IMPLEMENTED = ("core", "pytorch", "keras", "experimental")

#: shipped here as files (``python3 -m`` runs them), found by the ordinary path finder
FILES = ("launch",)


class NotInDetSdk(DetSdkError, ModuleNotFoundError):
    """A module of Determined that det_sdk does not implement."""


def __getattr__(name: str) -> object:
    return getattr(_det_sdk, name)


class _SameModule(importlib.abc.Loader):
    """Loads ``determined.X`` as the already imported ``det_sdk.X`` itself (not a copy)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: object) -> None:
        """Nothing to run: det_sdk's import ran the module."""


class _DeterminedNames(importlib.abc.MetaPathFinder):
    """Answers ``determined.*`` imports: det_sdk's module, the launcher files, or an error."""

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> "importlib.machinery.ModuleSpec | None":
        parts = fullname.split(".")
        if parts[0] != "determined" or len(parts) < 2 or parts[1] in FILES:
            return None
        twin = "det_sdk." + ".".join(parts[1:])
        public = not any(p.startswith("_") for p in parts[1:])
        if parts[1] in IMPLEMENTED and public and _exists(twin):
            return importlib.machinery.ModuleSpec(fullname, _SameModule(twin))
        raise NotInDetSdk(
            f"No module named {fullname!r}: det_sdk does not implement it (det_sdk's "
            f"`determined` answers {', '.join('determined.' + n for n in IMPLEMENTED)} "
            f"and determined.launch.*); {STATUS_PAGE} lists what det_sdk has instead",
            name=fullname)


def _exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


# first: a det_sdk package's own directory would otherwise give a second copy of its
# submodules under the determined name (two classes for one)
if not any(isinstance(f, _DeterminedNames) for f in sys.meta_path):
    sys.meta_path.insert(0, _DeterminedNames())
