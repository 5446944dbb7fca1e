"""Determined's launch model: an `entrypoint:` command runs once per node and starts the
node's workers itself; `entrypoint_script:` and `module:Class` run once per slot.

Fast: how a config is read, ClusterInfo's container fields, the launchers' arguments.
Slow (a real master): the Core API tutorial's distributed shape on 2 slots, its own
launcher spawning `len(slot_ids)` workers through `determined.launch.wrap_rank`.

This module's other half, its end-to-end tests (real processes): tests/e2e/test_launch_model.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import det_sdk as det
from det_sdk.config import launch_warnings, parse_experiment_config
from det_sdk.launch import horovod as horovod_launcher
from det_sdk.launch._node import node_slots, under_horovodrun


@pytest.mark.parametrize("raw, runs", [
    ({"entrypoint": "python3 launcher.py python3 4_distributed.py"}, "per_node"),
    ({"entrypoint": ["python3", "-m", "determined.launch.horovod", "python3", "t.py"]},
     "per_node"),
    ({"entrypoint_script": "python3 train.py"}, "per_slot"),
    ({"entrypoint": "model_def:MNistTrial"}, "per_slot"),
    ({"entrypoint": "python3 t.py", "entrypoint_runs": "per_slot"}, "per_slot"),
])
def test_which_entrypoints_run_once_per_node(raw: dict, runs: str) -> None:
    cfg = parse_experiment_config(raw)
    assert cfg.entrypoint_runs == runs
    # stored and read back (the master keeps the dumped config): the same
    assert parse_experiment_config(cfg.model_dump(mode="json")).entrypoint_runs == runs


def test_determineds_launcher_modules_become_det_sdks() -> None:
    cfg = parse_experiment_config(
        {"entrypoint": "python3 -m determined.launch.torch_distributed -- python3 train.py"})
    assert cfg.entrypoint_script == \
        "python3 -m det_sdk.launch.torch_distributed -- python3 train.py"
    with pytest.raises(det.errors.DetSdkError, match="entrypoint: DeepSpeed's launcher"):
        parse_experiment_config({"entrypoint": "python3 -m determined.launch.deepspeed t.py"})


def test_a_per_node_command_on_several_slots_is_warned_unless_it_is_a_launcher() -> None:
    two = {"resources": {"slots_per_trial": 2}}
    (warning,) = launch_warnings(parse_experiment_config({"entrypoint": "python3 train.py",
                                                          **two}))
    assert "runs once per node" in warning and "entrypoint_script:" in warning
    for quiet in ({"entrypoint": "python3 -m det_sdk.launch.horovod -- python3 t.py", **two},
                  {"entrypoint_script": "python3 train.py", **two},
                  {"entrypoint": "python3 train.py"}):
        assert launch_warnings(parse_experiment_config(quiet)) == []
    with pytest.raises(Exception, match="entrypoint_runs"):
        parse_experiment_config({"entrypoint": "x", "entrypoint_runs": "per_rack"})


def test_cluster_info_has_the_container_fields() -> None:
    env = {"DET_ALLOCATION_ID": "a", "DET_MASTER": "http://m", "DET_SESSION_TOKEN": "t",
           "DET_TASK_TYPE": "TRIAL", "DET_TRIAL_ID": "4", "DET_SLOT_IDS": "[0, 1, 2]",
           "DET_CONTAINER_ADDRS": '["10.0.0.1", "10.0.0.2"]', "DET_CONTAINER_RANK": "1",
           "DET_CLUSTER_ID": "c-1", "DET_USER_DATA": '{"team": "x"}'}
    info = det.get_cluster_info(env)
    assert info is not None
    assert (info.slot_ids, info.container_addrs, info.container_rank, info.cluster_id,
            info.user_data) == ([0, 1, 2], ["10.0.0.1", "10.0.0.2"], 1, "c-1", {"team": "x"})
    assert node_slots(env) == 3 and node_slots({}) == 1
    with pytest.raises(ValueError, match="DET_SLOT_IDS"):
        det.get_cluster_info({**env, "DET_SLOT_IDS": "[0,"})


def test_launcher_commands() -> None:
    assert horovod_launcher.parse_args(["--", "python3", "t.py"]) == ["python3", "t.py"]
    with pytest.raises(det.errors.DetSdkError, match="give the command"):
        horovod_launcher.parse_args([])
    wrapped = under_horovodrun(["python3", "t.py"], 2, {"DET_FAILURE_RECORD_DIR": "/r"})
    # horovodrun's own code, started without its TensorFlow-importing check
    assert wrapped[1:6] == ["-m", "det_sdk.launch.horovodrun", "-np", "2", "--gloo"]
    assert wrapped[6:][1:] == ["-m", "det_sdk.launch.catch", "--forward-signals",
                               "--record-dir", "/r", "--", "python3", "t.py"]


def test_the_launcher_reads_gloo_from_the_extension_files(tmp_path: Path) -> None:
    """det_sdk's horovodrun skips Horovod's check (a forked TensorFlow import) only where an
    extension's file names Gloo's rendezvous; elsewhere Horovod's own check decides."""
    import horovod

    from det_sdk.launch.horovodrun import gloo_in_extensions

    assert gloo_in_extensions(Path(horovod.__file__).parent) is True  # this venv's build
    (tmp_path / "tensorflow").mkdir()
    lib = tmp_path / "tensorflow" / "mpi_lib.cpython-311-x86_64-linux-gnu.so"
    lib.write_bytes(b"\x7fELF built with MPI only")
    assert gloo_in_extensions(tmp_path) is None
    lib.write_bytes(b"\x7fELF ... gloo::rendezvous::Context ...")
    assert gloo_in_extensions(tmp_path) is True
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "mpi_lib_v2.so").write_bytes(b"")  # empty: cannot be mapped
    lib.write_bytes(b"no mark")
    assert gloo_in_extensions(tmp_path) is None
