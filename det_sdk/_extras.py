"""Optional parts of det_sdk (pyproject.toml's extras): checked where a command needs one.

``pip install det_sdk`` installs what training scripts and the ``det`` CLI need; the
embedded master's web stack (FastAPI, uvicorn) is the ``master`` extra, which
``det master up`` needs. A command that needs a missing extra raises
:class:`~det_sdk.errors.MissingExtraError` saying how to install it, before it starts
anything, instead of an ``ImportError`` traceback from a child process.

>>> require_master("det master up")  # they are installed here
"""

from __future__ import annotations

import importlib.util

from det_sdk.errors import MissingExtraError

__all__ = ["MASTER_PACKAGES", "require_master"]

#: the import names of what only the master needs (pyproject.toml's ``master`` extra)
MASTER_PACKAGES = ("fastapi", "uvicorn")


def _missing(names: tuple[str, ...]) -> list[str]:
    missing = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a broken install, or sys.modules[name] = None
            found = False
        if not found:
            missing.append(name)
    return missing


def require_master(command: str) -> None:
    """Raise :class:`MissingExtraError` when the master's packages are not installed.

    ``command`` names what needs them (``"det master up"``), for the message.
    """
    missing = _missing(MASTER_PACKAGES)
    if missing:
        raise MissingExtraError(
            f"{command} needs the master's dependencies, which are not installed "
            f"(missing: {', '.join(missing)}); install them with: "
            f"pip install 'det_sdk[master]'")
