"""One error tree (issue 24): every exception class det_sdk defines derives from
``det_sdk.errors.DetSdkError`` and keeps a builtin base; the ``det`` CLI prints det_sdk's
errors (and OSError) as one line and lets anything else show as the bug it is.

This module's other half, its end-to-end tests (real processes): tests/e2e/test_errors.py.
"""

from __future__ import annotations

import doctest
import importlib
from collections.abc import Callable
from pathlib import Path

import pytest

import det_sdk
from det_sdk.errors import DetSdkError

PACKAGE = Path(det_sdk.__file__).resolve().parent


# Raising a builtin exception is Python's protocol in these places, not an error det_sdk
# reports: an abstract method, the end of a sequence, a missing module attribute; and
# SystemExit / KeyboardInterrupt are how a process exits or is interrupted, not errors.
_PROTOCOL_RAISES = {"NotImplementedError": None, "IndexError": "__getitem__",
                    "AttributeError": "__getattr__", "StopIteration": "__next__",
                    "SystemExit": None, "KeyboardInterrupt": None}


def _builtin_raises(path: Path, root: Path = PACKAGE.parent) -> list[str]:
    """``raise ValueError(...)`` and the like in ``path``, outside the protocol places."""
    import ast
    import builtins

    found: list[str] = []

    def visit(node: ast.AST, func: str | None) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            func = node.name
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            name = exc.id if isinstance(exc, ast.Name) else ""
            cls = getattr(builtins, name, None)
            if (isinstance(cls, type) and issubclass(cls, BaseException)
                    and not (name in _PROTOCOL_RAISES
                             and _PROTOCOL_RAISES[name] in (None, func))):
                found.append(f"{path.relative_to(root)}:{node.lineno}: raise {name}")
        for child in ast.iter_child_nodes(node):
            visit(child, func)

    visit(ast.parse(path.read_text()), None)
    return found


def test_det_sdk_raises_only_its_own_errors() -> None:
    """Every error det_sdk raises is a DetSdkError (UsageError for a bad value,
    ArgumentTypeError for a wrong kind, StateError for a call at the wrong time...)."""
    raises = [r for path in sorted(PACKAGE.rglob("*.py")) if "_compat_path" not in path.parts
              for r in _builtin_raises(path)]
    assert not raises, "builtin exceptions raised directly:\n" + "\n".join(raises)


def test_the_scan_finds_a_builtin_raise(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("def f(x):\n    if x:\n        raise ValueError('x')\n"
                     "class S:\n    def __getitem__(self, i):\n        raise IndexError(i)\n"
                     "    def pop(self):\n        raise IndexError('empty')\n")
    assert _builtin_raises(probe, tmp_path) == ["probe.py:3: raise ValueError",
                                                "probe.py:8: raise IndexError"]


def test_builtin_bases_still_catch() -> None:
    """``except ValueError`` (or LookupError, ConnectionError...) in users' code still works."""
    from det_sdk.client import MasterError, MasterUnreachable
    from det_sdk.master.errors import IllegalTransition
    from det_sdk.session import RunNotFoundError

    with pytest.raises(ConnectionError):
        raise MasterUnreachable("no master")
    with pytest.raises(LookupError):
        raise RunNotFoundError("no run 3")
    with pytest.raises(ValueError):
        raise IllegalTransition("COMPLETED -> RUNNING")
    err = MasterError(404, "master: no trial 7")
    assert isinstance(err, RuntimeError) and isinstance(err, DetSdkError) and err.status == 404


def test_errors_module_examples() -> None:
    result = doctest.testmod(importlib.import_module("det_sdk.errors"))
    assert result.attempted > 0 and result.failed == 0


def test_cli_shows_a_bug_as_a_bug(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A KeyError out of a command is a bug of det_sdk: it propagates (a traceback), where
    a DetSdkError or an OSError is the user's message and exit status 1."""
    from det_sdk.cli import main as cli

    def fails_with(err: BaseException) -> Callable[[object], int]:
        def command(args: object) -> int:
            raise err
        return command

    monkeypatch.setattr(cli, "_runs_list", fails_with(KeyError("uuid")))
    with pytest.raises(KeyError):
        cli.main(["runs", "list", "--runs-dir", str(tmp_path)])
    for err in (DetSdkError("refused: because"), FileNotFoundError(2, "No such file", "x.npz")):
        monkeypatch.setattr(cli, "_runs_list", fails_with(err))
        assert cli.main(["runs", "list", "--runs-dir", str(tmp_path)]) == 1
        assert capsys.readouterr().err == f"det: error: {err}\n"
