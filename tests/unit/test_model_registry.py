"""The master's model registry (det_sdk.master.models, issue 38) on a real SQLite store:
versions count from 1 per model, point at checkpoints the master knows, and bad input is
refused naming what was expected. The HTTP side and the client: tests/e2e/
test_pytorch_trainer_example.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from det_sdk.errors import DetSdkError
from det_sdk.master.errors import Conflict, InvalidRequest, NotFound
from det_sdk.master.models import ModelRegistry
from det_sdk.master.store import Store

UUIDS = ["00000000-0000-4000-8000-00000000000" + str(i) for i in range(3)]


@pytest.fixture
def registry(tmp_path: Path) -> ModelRegistry:
    store = Store(tmp_path / "master.db")
    for i, uuid in enumerate(UUIDS):
        store.put_checkpoint({"uuid": uuid, "trial_id": 1, "steps_completed": i, "epoch": 0})
    return ModelRegistry(store)


def test_versions_count_from_one_per_model_and_survive_a_new_registry(
        registry: ModelRegistry, tmp_path: Path) -> None:
    a = registry.create("mnist", "digits", {"owner": "me"})
    registry.create("other")
    assert a["num_versions"] == 0 and a["metadata"] == {"owner": "me"}
    assert registry.register("mnist", UUIDS[2])["version"] == 1
    assert registry.register(str(a["id"]), UUIDS[0])["version"] == 2  # by id too
    assert registry.register("other", UUIDS[1])["version"] == 1
    again = ModelRegistry(Store(tmp_path / "master.db"))  # a restarted master
    assert [v["checkpoint_uuid"] for v in again.versions("mnist")] == [UUIDS[2], UUIDS[0]]
    assert again.version("mnist", -1)["version"] == 2
    assert [m["name"] for m in again.list()] == ["mnist", "other"]
    assert again.get("mnist")["num_versions"] == 2


def test_bad_input_is_refused_naming_it(registry: ModelRegistry) -> None:
    registry.create("m")
    for call, err, words in (
            (lambda: registry.create("m"), Conflict, "already exists"),
            (lambda: registry.create("has space"), InvalidRequest, "model name"),
            (lambda: registry.create("n", metadata={"x": float("nan")}), InvalidRequest,
             "metadata"),
            (lambda: registry.register("m", "no-such-uuid"), NotFound, "no checkpoint"),
            (lambda: registry.register("nope", UUIDS[0]), NotFound, "no model"),
            (lambda: registry.get("9" * 30), NotFound, "no model"),
            (lambda: registry.version("m", 1), NotFound, "no version")):
        with pytest.raises(err, match=words) as info:
            call()
        assert isinstance(info.value, DetSdkError)
