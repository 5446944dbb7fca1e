"""det_sdk.env (issue 24): the DET_* protocol is named and read in one place."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import det_sdk
from det_sdk import env
from det_sdk.errors import DetSdkError

PACKAGE = Path(det_sdk.__file__).resolve().parent
# os.environ.get("DET_...") / os.environ["DET_..."] / os.getenv("DET_...")
_READ = re.compile(r"""(?:environ(?:\.get\(|\[)|getenv\()\s*["']DET_""")
#: the readers: env.py, and info.py, which turns a task's variables into ClusterInfo
_READERS = {"env.py", "info.py"}


def test_only_env_and_info_read_det_variables_from_the_environment() -> None:
    found = [f"{path.relative_to(PACKAGE)}:{n}" for path in sorted(PACKAGE.rglob("*.py"))
             if "_compat_path" not in path.parts and path.name not in _READERS
             for n, line in enumerate(path.read_text().splitlines(), 1) if _READ.search(line)]
    assert not found, f"DET_* read outside det_sdk.env / det_sdk.info: {found}"
    assert _READ.search('x = os.environ.get("DET_MASTER")')  # the scan sees a read


def test_settings_are_named_and_empty_means_unset() -> None:
    assert env.setting("DET_MASTER", {"DET_MASTER": ""}) is None
    assert env.setting("DET_TORCH_TIMEOUT", {"DET_TORCH_TIMEOUT": "5"}) == "5"
    with pytest.raises(DetSdkError, match="DET_MASTR is not one of det_sdk's settings"):
        env.setting("DET_MASTR", {})


def test_task_variables() -> None:
    assert env.task_owner({}) is None
    assert env.task_owner({"DET_ALLOCATION_ID": "a", "DET_TRIAL_ID": "x"}) == {
        "allocation_id": "a", "trial_id": None}
    assert env.port_offset({"DET_UNIQUE_PORT_OFFSET": "17"}) == 17
    assert env.port_offset({}) == 0
    assert env.collective_token({"DET_COLLECTIVE_TOKEN": "t"}) == "t"


def test_outside_drops_every_family_but_the_users_settings() -> None:
    given = {"PATH": "/bin", "DET_MASTER": "http://m", "DET_RESUME": "3",
             "DET_ALLOCATION_ID": "a", "DET_USER_TOKEN": "u", "HOROVOD_RANK": "1",
             "RANK": "0", "OMPI_COMM_WORLD_RANK": "0", "DET_CREDENTIALS": "/c"}
    assert env.outside(given) == {"PATH": "/bin", "DET_MASTER": "http://m",
                                  "DET_CREDENTIALS": "/c"}
    assert env.outside(given, keep=["DET_RESUME"], X="1")["DET_RESUME"] == "3"
