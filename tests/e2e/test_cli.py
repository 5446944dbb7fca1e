"""The `det` command and `import det_sdk`: fast, and never importing TensorFlow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO

# Stack-neutral: the det CLI and import det_sdk load no Keras.
pytestmark = pytest.mark.stack_neutral

DET = Path(sys.executable).with_name("det")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True, text=True, check=True, cwd=REPO,
    ).stdout.splitlines()[-1]
    return set(json.loads(out))


def test_import_det_sdk_does_not_import_tensorflow() -> None:
    mods = _modules_after("import det_sdk")
    assert "tensorflow" not in mods and "det_sdk" in mods


def test_det_keras_loads_on_first_use() -> None:
    # det.keras loads on first use, its TensorFlow engine when one of its names is used
    # (init() picks the engine of the backend Keras runs on: docs/backends.md)
    mods = _modules_after("import det_sdk as det\nassert callable(det.keras.init)")
    assert "det_sdk.keras" in mods and "tensorflow" not in mods
    mods = _modules_after("import det_sdk as det\nassert det.keras.DeterminedCallback")
    assert "tensorflow" in mods


def test_cli_help_does_not_import_tensorflow() -> None:
    code = (
        "from det_sdk.cli.main import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit as e:\n    assert e.code == 0\n"
    )
    assert "tensorflow" not in _modules_after(code)
    proc = subprocess.run([str(DET), "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "usage: det" in proc.stdout


def test_runs_list(tmp_path: Path) -> None:
    from det_sdk.session import LocalSession

    s = LocalSession.create(tmp_path, hparams={}, seed=1, config={})
    s.report_metrics("validation", 10, 1, {"val_loss": 0.25})
    s.close()
    proc = subprocess.run([str(DET), "runs", "list", "--runs-dir", str(tmp_path), "--json"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert rows == [{"run_id": 1, "epoch": 1, "steps_completed": 10, "checkpoints": 0,
                     "checkpoints_in": None, "last_validation": {"val_loss": 0.25}}]
    table = subprocess.run([str(DET), "runs", "list", "--runs-dir", str(tmp_path)],
                           capture_output=True, text=True).stdout
    assert "val_loss=0.25" in table


def test_cli_bad_usage_exits_nonzero() -> None:
    proc = subprocess.run([str(DET), "runs", "bogus"], capture_output=True, text=True)
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
