"""Start-up and packaging (issue 26): what ``import det_sdk`` and ``det --help`` load, the
message of a missing ``master`` extra, one version source, the files a wheel needs.

Each check runs in a fresh interpreter (``python -c``, well under a second: no master, no
TensorFlow), since this test process has long imported everything. The timing goals
themselves (<= 1.05x and <= 2x ``python -c pass``) are scripts/bench/bench_import.py's.

This module's other half, its end-to-end tests (real processes): tests/e2e/test_startup.py.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_missing_extra_is_a_det_sdk_error_and_an_import_error() -> None:
    from det_sdk.errors import DetSdkError, MissingExtraError

    assert issubclass(MissingExtraError, DetSdkError)
    assert issubclass(MissingExtraError, ImportError)


def test_resource_manager_choices_match_the_master() -> None:
    from det_sdk.cli.main import RESOURCE_MANAGERS
    from det_sdk.master.resources import KINDS

    assert RESOURCE_MANAGERS == KINDS


def test_packaging_files_and_extras() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = " ".join(project["dependencies"])
    assert "fastapi" not in base and "uvicorn" not in base  # the master's are an extra
    master = " ".join(project["optional-dependencies"]["master"])
    assert "fastapi" in master and "uvicorn" in master
    # no framework in the base; Keras 3 on JAX or PyTorch installs neither TensorFlow nor
    # Horovod (docs/backends.md)
    assert not any(f in base for f in ("tensorflow", "keras", "torch", "jax", "horovod"))
    for extra in ("jax", "torch"):
        deps = " ".join(project["optional-dependencies"][extra])
        assert extra in deps and "keras>=3" in deps
        assert "tensorflow" not in deps and "horovod" not in deps
    assert project["license"] == {"text": "Apache-2.0"}
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert (ROOT / "det_sdk" / "py.typed").is_file()
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert '-e ".[dev,master]"' in setup  # the tests start masters
