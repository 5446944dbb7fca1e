"""One error tree (issue 24): every exception class det_sdk defines derives from
``det_sdk.errors.DetSdkError`` and keeps a builtin base; the ``det`` CLI prints det_sdk's
errors (and OSError) as one line and lets anything else show as the bug it is.

This module's other half, the tests that start no process: tests/unit/test_errors.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import det_sdk
from harness.master import free_port
from tests.support import REPO

# Stack-neutral: the error tree and the CLI's printing of errors.
pytestmark = pytest.mark.stack_neutral

DET = Path(sys.executable).with_name("det")
PACKAGE = Path(det_sdk.__file__).resolve().parent

#: The documented exceptions to the tree (module, class): each says why in its docstring.
# control flow, not errors: the two Keras engines' stops
OUTSIDE_THE_TREE = {("det_sdk.keras._fit_run", "Preempted"),
                    ("det_sdk.keras._neutral._fit", "Stopped")}

# Imports every module given, then lists every exception class det_sdk defines (every
# subclass of BaseException whose module is det_sdk's, found through __subclasses__, so
# that classes made in functions or class bodies count too) and whether TF was loaded.
_SCAN = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
from det_sdk.errors import DetSdkError

def walk(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from walk(sub)

rows = {}
for cls in walk(BaseException):
    if cls.__module__.split(".")[0] == "det_sdk":
        builtin = [b.__name__ for b in cls.__mro__ if b.__module__ == "builtins"
                   and b not in (Exception, BaseException, object)]
        rows[f"{cls.__module__}:{cls.__qualname__}"] = [issubclass(cls, DetSdkError), builtin]
print(json.dumps({"tensorflow": "tensorflow" in sys.modules, "classes": rows}))
"""


def _modules(keras: bool) -> list[str]:
    """det_sdk's modules from its files (not pkgutil, which imports packages to walk
    them): those under det_sdk/keras, or all the others."""
    import importlib.metadata
    import importlib.util

    # det_sdk.pytorch and torch's process group need torch, which the Keras 2 venv does
    # not have; the JAX and PyTorch Keras engine needs Keras 3
    no_torch = importlib.util.find_spec("torch") is None
    keras2 = importlib.metadata.version("keras").startswith("2.")
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if no_torch and (parts[1:2] == ("pytorch",) or parts[1:3] == ("collectives", "torch")):
            continue
        if keras2 and parts[1:3] == ("keras", "_neutral"):
            continue
        if (len(parts) > 1 and parts[1] == "keras") == keras:
            names.append(".".join(parts))
    return names


def _scan(modules: list[str]) -> dict:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = subprocess.run([sys.executable, "-c", _SCAN, *modules], capture_output=True,
                         text=True, cwd=REPO, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


def _check(classes: dict[str, list]) -> None:
    outside = {tuple(name.split(":")) for name, (inside, _) in classes.items() if not inside}
    assert outside <= OUTSIDE_THE_TREE, f"exception classes outside DetSdkError: {outside}"
    # each keeps the builtin base that says what kind of error it is (except ValueError...)
    bare = [name for name, (inside, builtin) in classes.items()
            if inside and not builtin and not name.endswith(":DetSdkError")]
    assert not bare, f"in the tree with no builtin base (ValueError, OSError...): {bare}"


def test_every_error_outside_keras_derives_from_det_sdk_error_without_tensorflow() -> None:
    modules = _modules(keras=False)
    assert {"det_sdk.client", "det_sdk.master.errors", "det_sdk.cli.main"} <= set(modules)
    found = _scan(modules)
    assert not found["tensorflow"], "a module outside det_sdk.keras imported TensorFlow"
    classes = found["classes"]
    # the scan sees what it must (a lost import would make this pass vacuously)
    for name in ("det_sdk.client:MasterError", "det_sdk.client:MasterUnreachable",
                 "det_sdk.master.errors:IllegalTransition", "det_sdk.master.pages:InvalidCursor",
                 "det_sdk.storage:CheckpointNotFoundError", "det_sdk.session.base:RunNotFoundError",
                 "det_sdk.master.resources.slurm:SlurmError", "det_sdk.config:ConfigError",
                 "det_sdk.cli.ui_cmd:TensorBoardError", "det_sdk.errors:UsageError"):
        assert name in classes, name
    _check(classes)


def test_every_error_of_det_sdk_keras_derives_from_det_sdk_error() -> None:
    modules = _modules(keras=True)
    classes = _scan(modules)["classes"]
    for name in ("det_sdk.keras._trial:TrialLoadError", "det_sdk.keras._fit_run:Preempted",
                 "det_sdk.keras._callback_codec:CallbackStateError"):
        assert name in classes, name
    _check(classes)


def _det(*args: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("DET_USER_TOKEN", "DET_MASTER")}
    base["DET_CREDENTIALS"] = str(tmp_path / "credentials.json")  # no saved token
    return subprocess.run([str(DET), *args], capture_output=True, text=True, timeout=60,
                          env={**base, **env}, cwd=tmp_path)


def _clean_error(out: subprocess.CompletedProcess[str], expected: str) -> None:
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith("det: error: ") and expected in out.stderr, out.stderr


def test_cli_user_errors_are_one_line(tmp_path: Path) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    # no token for that master (UsageError)
    _clean_error(_det("-m", nowhere, "experiment", "list", tmp_path=tmp_path),
                 f"no token for {nowhere}")
    # nothing answers there (MasterUnreachable)
    _clean_error(_det("-m", nowhere, "experiment", "list", tmp_path=tmp_path,
                      DET_USER_TOKEN="t"), f"no master answers at {nowhere}")
    # a config file that is not there, one that is not YAML (ConfigError)
    _clean_error(_det("experiment", "create", "missing.yaml", ".", tmp_path=tmp_path),
                 "config file not found")
    (tmp_path / "bad.yaml").write_text("a: [1,\n")
    _clean_error(_det("job", "run", "bad.yaml", ".", tmp_path=tmp_path), "is not valid YAML")
    # a model directory that is not there (UsageError), after the config passed
    (tmp_path / "job.yaml").write_text("entrypoint: python3 run.py\n")
    _clean_error(_det("job", "run", "job.yaml", "no-such-dir", tmp_path=tmp_path),
                 "does not exist")
    # det tensorboard: not installed, or the --runs-dir it is given is not there
    out = _det("tensorboard", "run", "--runs-dir", "no-such-runs", tmp_path=tmp_path)
    _clean_error(out, "no such directory" if "not installed" not in out.stderr
                 else "TensorBoard is not installed")
