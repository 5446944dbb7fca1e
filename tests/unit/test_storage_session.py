"""det_sdk.storage (atomic checkpoint directories) and det_sdk.session (local runs).

This module's other half, its end-to-end tests (real processes): tests/e2e/test_storage_session.py.
"""

from __future__ import annotations

import json

import pytest

from det_sdk.session import LocalSession, RunNotFoundError
from det_sdk.storage import CheckpointNotFoundError, SharedFSStorage


class Boom(Exception):
    pass


def _entries(base):
    return sorted(p.name for p in base.iterdir())


def test_store_publishes_a_complete_checkpoint(tmp_path):
    storage = SharedFSStorage(tmp_path / "ckpts")
    with storage.store() as (uuid, path):
        (path / "a.bin").write_bytes(b"abc")
        assert storage.list() == []  # not visible while being written
    assert storage.list() == [uuid]
    assert (storage.path(uuid) / "a.bin").read_bytes() == b"abc"
    assert _entries(tmp_path / "ckpts") == [uuid]  # no temp dir left


def test_failed_save_leaves_nothing_listed_and_no_temp_dir(tmp_path):
    base = tmp_path / "ckpts"
    storage = SharedFSStorage(base)
    with pytest.raises(Boom), storage.store("ckpt-1") as (_, path):
        (path / "half.bin").write_bytes(b"x" * 100)
        (path / "sub").mkdir()
        (path / "sub" / "f").write_bytes(b"y")
        raise Boom
    assert storage.list() == []
    assert _entries(base) == []
    with pytest.raises(CheckpointNotFoundError):
        storage.path("ckpt-1")


def test_failed_save_leaves_the_previous_checkpoint_intact(tmp_path):
    storage = SharedFSStorage(tmp_path / "ckpts")
    with storage.store("first") as (_, path):
        (path / "weights.bin").write_bytes(b"good weights")
    with pytest.raises(Boom), storage.store("second") as (_, path):
        (path / "weights.bin").write_bytes(b"half")
        raise Boom
    assert storage.list() == ["first"]
    assert (storage.path("first") / "weights.bin").read_bytes() == b"good weights"
    assert _entries(tmp_path / "ckpts") == ["first"]


def test_keyboard_interrupt_mid_save_also_cleans_up(tmp_path):
    storage = SharedFSStorage(tmp_path)
    with pytest.raises(KeyboardInterrupt), storage.store("x") as (_, path):
        (path / "f").write_bytes(b"1")
        raise KeyboardInterrupt
    assert _entries(tmp_path) == []


def test_abandoned_temp_dir_of_a_dead_process_is_swept_and_never_listed(tmp_path):
    storage = SharedFSStorage(tmp_path)
    # pid 2**22 + 1 is above Linux's pid_max limit, so no live process has it
    dead = tmp_path / f".tmp-crashed-{2**22 + 1}"
    dead.mkdir()
    (dead / "half.bin").write_bytes(b"x")
    assert storage.list() == []
    with storage.store("new"):
        pass
    assert _entries(tmp_path) == ["new"]


def test_path_of_unknown_uuid(tmp_path):
    storage = SharedFSStorage(tmp_path)
    with pytest.raises(CheckpointNotFoundError, match="no checkpoint 'nope'"):
        storage.path("nope")
    with pytest.raises(LookupError):
        storage.delete("nope")


def test_list_of_missing_base_is_empty(tmp_path):
    assert SharedFSStorage(tmp_path / "not-yet").list() == []


@pytest.mark.parametrize("bad", ["a/b", "../escape", "..", ".", "a\\b", ".hidden"])
def test_uuids_that_escape_the_directory_are_refused(tmp_path, bad):
    base = tmp_path / "ckpts"
    storage = SharedFSStorage(base)
    (tmp_path / "escape").mkdir()  # something ../escape would reach
    with pytest.raises(ValueError, match="not a checkpoint uuid"):
        storage.path(bad)
    with pytest.raises(ValueError, match="not a checkpoint uuid"), storage.store(bad):
        pass
    with pytest.raises(ValueError, match="not a checkpoint uuid"):
        storage.delete(bad)
    assert (tmp_path / "escape").is_dir()
    assert not base.exists() or _entries(base) == []


def test_empty_uuid_is_refused_by_path(tmp_path):
    # (store("") is store(): a fresh uuid)
    with pytest.raises(ValueError, match="not a checkpoint uuid"):
        SharedFSStorage(tmp_path).path("")


@pytest.fixture
def sessions():
    opened = []

    def track(session):
        opened.append(session)
        return session

    yield track
    for s in opened:
        s.close()


def _create(runs, config=None, **kw):
    return LocalSession.create(runs, hparams=kw.get("hparams", {}), seed=kw.get("seed", 1),
                               config=config or {})


def _checkpoint(session, steps, metrics=None):
    with session.storage.store() as (uuid, path):
        (path / "state.bin").write_bytes(b"s")
    session.report_checkpoint(uuid, {"steps_completed": steps, "epoch": steps // 10,
                                     "batch": 0, "metrics": metrics or {}})
    return uuid


def test_run_ids_increment(tmp_path, sessions):
    first = sessions(_create(tmp_path, hparams={"lr": 0.1}, seed=7))
    second = sessions(_create(tmp_path))
    third = sessions(_create(tmp_path))
    assert [first.run_id, second.run_id, third.run_id] == [1, 2, 3]
    assert first.run_dir == tmp_path / "1"
    info = json.loads((tmp_path / "1" / "run.json").read_text())
    assert info["run_id"] == 1
    assert info["seed"] == 7
    assert info["hparams"] == {"lr": 0.1}


def test_run_ids_skip_existing_directories(tmp_path, sessions):
    (tmp_path / "5").mkdir()
    assert sessions(_create(tmp_path)).run_id == 6


def test_reopen_latest_gives_the_newest(tmp_path, sessions):
    sessions(_create(tmp_path, seed=1))
    sessions(_create(tmp_path, seed=2))
    latest = sessions(LocalSession.reopen(tmp_path, "latest"))
    assert latest.run_id == 2
    assert latest.info["seed"] == 2
    assert sessions(LocalSession.reopen(tmp_path, 1)).run_id == 1
    assert sessions(LocalSession.reopen(tmp_path, "1")).run_id == 1


def test_reopen_latest_with_no_runs(tmp_path):
    with pytest.raises(RunNotFoundError, match="no run to resume"):
        LocalSession.reopen(tmp_path / "empty", "latest")


def test_reopen_unknown_id_names_it(tmp_path, sessions):
    sessions(_create(tmp_path))
    with pytest.raises(RunNotFoundError) as info:
        LocalSession.reopen(tmp_path, 42)
    assert isinstance(info.value, LookupError)
    assert "no local run 42" in str(info.value)
    assert "runs: 1" in str(info.value)


def test_reopen_non_numeric_id_names_it(tmp_path, sessions):
    sessions(_create(tmp_path))
    with pytest.raises(RunNotFoundError, match="'abc'"):
        LocalSession.reopen(tmp_path, "abc")


def test_reopen_drops_metrics_after_the_latest_checkpoint(tmp_path, sessions):
    s = sessions(_create(tmp_path))
    s.report_metrics("training", 10, 1, {"loss": 1.0})
    s.report_metrics("validation", 10, 1, {"val_loss": 0.9})
    _checkpoint(s, 10)
    s.report_metrics("training", 20, 2, {"loss": 0.8})
    s.report_metrics("validation", 20, 2, {"val_loss": 0.7})
    s.close()
    reopened = sessions(LocalSession.reopen(tmp_path, s.run_id))
    rows = reopened.read_metrics()
    assert [(r["group"], r["steps_completed"]) for r in rows] == [
        ("training", 10), ("validation", 10)
    ]
    # and the file stays appendable after the rewrite
    reopened.report_metrics("training", 20, 2, {"loss": 0.75})
    assert [r["metrics"] for r in reopened.read_metrics()][-1] == {"loss": 0.75}


def test_reopen_without_checkpoint_drops_every_metric(tmp_path, sessions):
    s = sessions(_create(tmp_path))
    s.report_metrics("training", 10, 1, {"loss": 1.0})
    s.close()
    assert sessions(LocalSession.reopen(tmp_path, 1)).read_metrics() == []


def test_latest_checkpoint_follows_reports_and_survives_reopen(tmp_path, sessions):
    s = sessions(_create(tmp_path))
    assert s.latest_checkpoint is None
    _checkpoint(s, 10)
    second = _checkpoint(s, 20)
    assert s.latest_checkpoint == second
    s.close()
    assert sessions(LocalSession.reopen(tmp_path, 1)).latest_checkpoint == second


def test_checkpoint_for_trial_latest_and_best_by_val_loss(tmp_path, sessions):
    s = sessions(_create(tmp_path))
    _checkpoint(s, 10, {"val_loss": 0.5, "val_accuracy": 0.6})
    best = _checkpoint(s, 20, {"val_loss": 0.2, "val_accuracy": 0.7})
    last = _checkpoint(s, 30, {"val_loss": 0.4, "val_accuracy": 0.9})
    assert s.checkpoint_for_trial(1) == last
    assert s.checkpoint_for_trial(1, best=True) == best
    assert s.checkpoint_path(best) == tmp_path / "1" / "checkpoints" / best


def test_checkpoint_for_trial_best_larger_is_better(tmp_path, sessions):
    config = {"searcher": {"metric": "val_accuracy", "smaller_is_better": False}}
    s = sessions(_create(tmp_path, config=config))
    _checkpoint(s, 10, {"val_loss": 0.5, "val_accuracy": 0.6})
    best = _checkpoint(s, 20, {"val_loss": 0.9, "val_accuracy": 0.95})
    _checkpoint(s, 30, {"val_loss": 0.1, "val_accuracy": 0.7})
    assert s.checkpoint_for_trial(1, best=True) == best


def test_checkpoint_for_trial_of_another_run(tmp_path, sessions):
    first = sessions(_create(tmp_path))
    uuid = _checkpoint(first, 10, {"val_loss": 0.3})
    other = sessions(_create(tmp_path))
    assert other.checkpoint_for_trial(1) == uuid
    assert other.checkpoint_path(uuid) == tmp_path / "1" / "checkpoints" / uuid


def test_checkpoint_for_trial_without_checkpoints(tmp_path, sessions):
    s = sessions(_create(tmp_path))
    with pytest.raises(CheckpointNotFoundError, match="has no checkpoint"):
        s.checkpoint_for_trial(1)
    with pytest.raises(RunNotFoundError, match="no local run 9"):
        s.checkpoint_for_trial(9)


def test_checkpoint_for_trial_best_without_the_metric(tmp_path, sessions):
    s = sessions(_create(tmp_path))
    _checkpoint(s, 10, {"loss": 0.3})
    with pytest.raises(CheckpointNotFoundError, match="'val_loss'"):
        s.checkpoint_for_trial(1, best=True)


def test_deleted_checkpoint_directory_is_not_offered(tmp_path, sessions):
    # retention keeps both here: the test deletes one itself
    s = sessions(_create(tmp_path, config={"checkpoint_storage": {"save_trial_latest": 2}}))
    kept = _checkpoint(s, 10, {"val_loss": 0.5})
    gone = _checkpoint(s, 20, {"val_loss": 0.1})
    s.storage.delete(gone)
    assert s.checkpoint_for_trial(1) == kept
    assert s.checkpoint_for_trial(1, best=True) == kept
    with pytest.raises(CheckpointNotFoundError):
        s.checkpoint_path(gone)


def test_local_retention_keeps_latest_and_best_and_survives_its_own_deletions(
        tmp_path, sessions):
    s = sessions(_create(tmp_path))  # the defaults: latest 1, best 1 (val_loss, smaller)
    first = _checkpoint(s, 10, {"val_loss": 0.1})
    uuids = [_checkpoint(s, 10 * i, {"val_loss": 0.5 + i}) for i in range(2, 6)]
    assert sorted(s.storage.list()) == sorted([first, uuids[-1]])
    assert s.checkpoint_for_trial(1) == uuids[-1]
    assert s.checkpoint_for_trial(1, best=True) == first


def test_checkpoint_path_refuses_bad_uuid(tmp_path, sessions):
    s = sessions(_create(tmp_path))
    with pytest.raises(ValueError, match="not a checkpoint uuid"):
        s.checkpoint_path("../1")


def test_retention_of_a_reopened_run_counts_the_checkpoints_stored_before(tmp_path, sessions):
    """A resumed run's first save applies retention to the previous process's checkpoints
    too (the rows of stored checkpoints are read once, then kept in memory)."""
    s = sessions(_create(tmp_path, config={"checkpoint_storage": {"save_trial_best": 0,
                                                                   "save_trial_latest": 2}}))
    old = [_checkpoint(s, 10 * i) for i in range(1, 3)]
    s.close()
    again = sessions(LocalSession.reopen(tmp_path, 1))
    newest = _checkpoint(again, 30)
    assert sorted(again.storage.list()) == sorted([old[1], newest])
    last = _checkpoint(again, 40)
    assert sorted(again.storage.list()) == sorted([newest, last])


def test_retention_after_a_checkpoint_deleted_by_someone_else(tmp_path, sessions):
    s = sessions(_create(tmp_path, config={"checkpoint_storage": {"save_trial_best": 0,
                                                                   "save_trial_latest": 2}}))
    first, second = _checkpoint(s, 10), _checkpoint(s, 20)
    s.storage.delete(first)  # `det checkpoint delete`, between two saves
    third = _checkpoint(s, 30)
    assert sorted(s.storage.list()) == sorted([second, third])
    fourth = _checkpoint(s, 40)
    assert sorted(s.storage.list()) == sorted([third, fourth])


def test_a_save_after_the_checkpoint_folder_was_removed_recreates_it(tmp_path):
    import shutil

    storage = SharedFSStorage(tmp_path / "ckpt")
    with storage.store() as (_, path):
        (path / "state.bin").write_bytes(b"1")
    shutil.rmtree(tmp_path / "ckpt")
    with storage.store() as (second, path):
        (path / "sub").mkdir()
        (path / "sub" / "state.bin").write_bytes(b"2")
    assert storage.list() == [second]
    assert (storage.path(second) / "sub" / "state.bin").read_bytes() == b"2"


def test_retention_records_what_it_deleted(tmp_path, sessions):
    s = sessions(_create(tmp_path))  # latest 1, best 1
    first = _checkpoint(s, 10, {"val_loss": 0.1})
    middle = _checkpoint(s, 20, {"val_loss": 0.9})
    _checkpoint(s, 30, {"val_loss": 0.8})
    deleted = [json.loads(line)["uuid"]
               for line in (s.run_dir / "deleted.jsonl").read_text().splitlines()]
    assert deleted == [middle] and first not in deleted


def _bucket_run(runs, run_id, storage, reported, deleted):
    """A local run's folder as a run that checkpointed to a bucket leaves it (its storage
    would need credentials to open: none here, as for `det runs list`)."""
    from det_sdk.config.storage import mask_config_secrets

    run_dir = runs / str(run_id)
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({
        "run_id": run_id, "created": 0, "seed": 1, "hparams": {},
        "config": mask_config_secrets({"checkpoint_storage": storage})}))
    (run_dir / "checkpoints.jsonl").write_text("".join(
        json.dumps({"uuid": u, "steps_completed": 10, "epoch": 1, "metrics": {}}) + "\n"
        for u in reported))
    (run_dir / "deleted.jsonl").write_text("".join(
        json.dumps({"uuid": u, "time": 0}) + "\n" for u in deleted))


def test_runs_list_counts_a_bucket_runs_checkpoints_from_its_record(tmp_path, capsys):
    from det_sdk.cli.main import main
    from det_sdk.session import list_runs

    _bucket_run(tmp_path, 1, {"type": "s3", "bucket": "ckpts", "prefix": "team/a",
                              "access_key": "AKIA", "secret_key": "s3cr3t-value"},
                ["a", "b", "c"], ["a"])
    _bucket_run(tmp_path, 2, {"type": "azure", "container": "c1",
                              "connection_string": "UseDevelopmentStorage=true"}, ["x"], [])
    _bucket_run(tmp_path, 3, {"host_path": "gs://b2/p"}, ["y", "z"], ["y", "z"])
    folder_run = tmp_path / "4"  # checkpoints in its own folder: counted on disk
    folder_run.mkdir()
    (folder_run / "run.json").write_text(json.dumps({"run_id": 4, "config": {}}))
    (folder_run / "checkpoints.jsonl").write_text(json.dumps({"uuid": "gone"}) + "\n")
    rows = {r["run_id"]: r for r in list_runs(tmp_path)}
    assert [(rows[i]["checkpoints"], rows[i]["checkpoints_in"]) for i in (1, 2, 3, 4)] == [
        (2, "s3://ckpts/team/a"), (1, "az://c1"), (0, "gs://b2/p"), (0, None)]
    assert main(["runs", "list", "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "2*" in out and "* in a bucket" in out and "s3cr3t" not in out
