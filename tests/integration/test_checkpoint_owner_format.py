"""Issue 46: a checkpoint a master's task saved (it holds the master's owner file, which
came after checkpoint format 2) edited to look like a genuine format-1 one (no
checksums.json, no keras_major) is damaged: refused as corrupt, which the master marks and
falls back from, never retried as "saved by another Keras"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

tf = pytest.importorskip("tensorflow")

import det_sdk as det  # noqa: E402
from det_sdk.failure import Failure  # noqa: E402
from det_sdk.keras import _checkpoint  # noqa: E402
from det_sdk.storage import OWNER_FILE  # noqa: E402
from tests.integration.test_checkpoint_verify import _checkpoint_dir  # noqa: E402


def test_a_master_s_checkpoint_claiming_format_1_is_damaged(tmp_path: Path) -> None:
    path = _checkpoint_dir(tmp_path)
    (path / OWNER_FILE).write_text(json.dumps({"allocation_id": "a-1", "trial_id": 1}))
    meta = json.loads((path / "metadata.json").read_text())
    meta["format_version"] = 1
    meta.pop("keras_major")
    (path / "metadata.json").write_text(json.dumps(meta))
    (path / "checksums.json").unlink()
    with pytest.raises(det.errors.CheckpointCorruptError,
                       match=r"checksums\.json is missing") as err:
        _checkpoint.load_model(path)
    assert _checkpoint._must_verify(path)
    # what the master reads from the failing rank: a corrupt checkpoint, named
    failure = Failure(type=type(err.value).__name__, message=str(err.value))
    assert failure.type.endswith("CheckpointCorruptError") and path.name in failure.message
