"""Start-up and packaging (issue 26): what ``import det_sdk`` and ``det --help`` load, the
message of a missing ``master`` extra, one version source, the files a wheel needs.

Each check runs in a fresh interpreter (``python -c``, well under a second: no master, no
TensorFlow), since this test process has long imported everything. The timing goals
themselves (<= 1.05x and <= 2x ``python -c pass``) are scripts/bench/bench_import.py's.

This module's other half, the tests that start no process: tests/unit/test_startup.py.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import det_sdk

# Stack-neutral: what import det_sdk and det --help load (no Keras).
pytestmark = pytest.mark.stack_neutral

ROOT = Path(__file__).resolve().parents[2]

# what neither `import det_sdk` nor `det --help` may load: TensorFlow and the libraries
# only some commands need (the master's web stack, HTTP, validation, crypto, YAML)
HEAVY = ("tensorflow", "keras", "numpy", "pydantic", "httpx", "yaml", "fastapi", "uvicorn",
         "starlette", "secrets", "hmac", "hashlib", "sqlite3", "typing", "tarfile",
         "subprocess", "socket", "det_sdk.keras", "det_sdk.core", "det_sdk.master",
         "det_sdk.cli.master_cmd", "det_sdk.cli.ui_cmd", "det_sdk.client", "det_sdk.config")


def _python(code: str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, cwd=ROOT, timeout=60)
    if check:
        assert out.returncode == 0, out.stderr
    return out


def _loaded(code: str) -> list[str]:
    """Run ``code``, then list which of HEAVY are in sys.modules."""
    out = _python(textwrap.dedent(code) + "\nimport sys, json\n"
                  f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_det_sdk_loads_nothing_heavy() -> None:
    assert _loaded("import det_sdk") == []


def test_det_help_loads_no_command_module() -> None:
    code = """
    import contextlib, io
    from det_sdk.cli.main import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main(["--help"])
        except SystemExit as e:
            assert e.code == 0, e.code
    assert "usage: det" in out.getvalue() and "master" in out.getvalue(), out.getvalue()
    """
    assert _loaded(code) == []
    # a command's own module comes with the command (here: det master status, no master)
    loaded = _loaded("""
    import os, tempfile
    from det_sdk.cli.main import main
    d = tempfile.mkdtemp()
    assert main(["-m", "127.0.0.1:9", "master", "status", "--data-dir", d]) == 3
    """)
    assert "det_sdk.cli.master_cmd" in loaded and "fastapi" not in loaded, loaded


def test_public_names_load_on_first_use() -> None:
    out = _python("""
    import sys
    import det_sdk as det
    assert "det_sdk.errors" not in sys.modules
    assert issubclass(det.errors.UsageError, det.errors.DetSdkError)
    assert callable(det.core.init) and det.ClusterInfo.__name__ == "ClusterInfo"
    assert callable(det.get_cluster_info) and det.LOG_FORMAT.startswith("%(levelname)s")
    assert {"keras", "core", "errors"} <= set(dir(det)) and "keras" in det.__all__
    assert "tensorflow" not in sys.modules  # core and info do not bring it
    try:
        det.no_such_name
    except AttributeError as e:
        print(e)
    """)
    assert "module 'det_sdk' has no attribute 'no_such_name'" in out.stdout


def test_master_up_without_the_master_extra_says_how_to_install_it(tmp_path: Path) -> None:
    data_dir = tmp_path / "m"
    out = _python(f"""
    import sys
    sys.modules["fastapi"] = None  # as if `pip install det_sdk` without [master]
    from det_sdk.cli.main import main
    sys.exit(main(["master", "up", "--data-dir", {str(data_dir)!r}, "--port", "9"]))
    """, check=False)
    assert out.returncode == 1, out.stderr
    assert out.stderr.startswith("det: error: det master up needs the master's dependencies")
    assert "missing: fastapi" in out.stderr and "pip install 'det_sdk[master]'" in out.stderr
    assert "Traceback" not in out.stderr
    assert not data_dir.exists()  # refused before it started or created anything

    out = _python(f"""
    import sys
    sys.modules["uvicorn"] = None
    from det_sdk.master.__main__ import main
    sys.exit(main(["--data-dir", {str(data_dir)!r}, "--port", "9"]))
    """, check=False)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert "missing: uvicorn" in out.stderr and "pip install 'det_sdk[master]'" in out.stderr


def test_one_version_source() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "det_sdk.__version__"}
    # what a build reads (setuptools' own reading of pyproject.toml) is the package's
    from setuptools.config.pyprojecttoml import read_configuration

    built = read_configuration(ROOT / "pyproject.toml", expand=True)["project"]["version"]
    assert built == det_sdk.__version__
    out = _python("from det_sdk.cli.main import main; main(['--version'])", check=False)
    assert out.stdout.strip() == f"det_sdk {det_sdk.__version__}"


def test_training_side_works_without_the_master_extra() -> None:
    # what a training script and the CLI's client commands import (det_sdk.keras adds
    # TensorFlow, which costs seconds here: its modules import none of the master's)
    out = _python("""
    import sys
    for name in ("fastapi", "uvicorn", "starlette"):
        sys.modules[name] = None
    import det_sdk as det
    import det_sdk.api, det_sdk.client, det_sdk.config, det_sdk.session, det_sdk.cli.common
    assert callable(det.core.init)
    print(sorted(m for m in sys.modules if m.startswith("det_sdk.master")))
    """)
    assert out.stdout.strip() == "[]"
    keras_side = [p for p in (ROOT / "det_sdk").glob("[kcl]*/*.py")
                  if p.parts[-2] in ("keras", "core", "launch")]
    assert keras_side
    for path in keras_side:  # det_sdk.keras and the launchers import none of it either
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert not name.startswith(("fastapi", "uvicorn", "starlette",
                                            "det_sdk.master")), (path, name)


def test_the_engine_loads_no_framework() -> None:
    # det_sdk.engine is what every front shares: a second framework must be able to join
    # without TensorFlow (or torch) coming with it
    out = _python("""
    import pkgutil, importlib, sys, det_sdk.engine as engine
    names = [m.name for m in pkgutil.iter_modules(engine.__path__)]
    for name in names:
        importlib.import_module(f"det_sdk.engine.{name}")
    print(sorted(names), [m for m in ("tensorflow", "keras", "torch", "horovod")
                          if m in sys.modules])
    """)
    names, loaded = out.stdout.strip().splitlines()[-1].split("] [")
    assert all(n in names for n in ("run", "policy", "position", "signals", "writer")), names
    assert loaded == "]", out.stdout
