"""Small things a Determined user meets (issue 38): httpx's per-request INFO lines kept out
of trial logs, and `det master status/down` finding the master `DET_MASTER` names."""

from __future__ import annotations

import logging
from argparse import Namespace
from pathlib import Path

import pytest

from det_sdk.cli import master_cmd
from det_sdk.client import quiet_http_loggers


def test_httpx_info_is_quieted_unless_the_user_set_its_level() -> None:
    saved = {n: logging.getLogger(n).level for n in ("httpx", "httpcore", "mine")}
    try:
        logging.getLogger("httpx").setLevel(logging.NOTSET)
        logging.getLogger("httpcore").setLevel(logging.DEBUG)  # the user's choice
        logging.getLogger("mine").setLevel(logging.NOTSET)
        quiet_http_loggers()
        assert logging.getLogger("httpx").level == logging.WARNING
        assert logging.getLogger("httpcore").level == logging.DEBUG
        assert logging.getLogger("mine").level == logging.NOTSET
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


def test_status_and_down_take_the_data_dir_of_the_master_det_master_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DET_CREDENTIALS", str(tmp_path / "det" / "credentials.json"))
    monkeypatch.setenv("DET_MASTER_DIR", str(tmp_path / "default"))
    master_cmd._remember("http://127.0.0.1:9001", tmp_path / "a")
    master_cmd._remember("http://127.0.0.1:9002", tmp_path / "b")
    assert (tmp_path / "det" / "masters.json").stat().st_mode & 0o077 == 0

    def where(master: str, data_dir: str | None = None) -> Path:
        return master_cmd.data_dir_of(Namespace(master=master, data_dir=data_dir))

    assert where("http://127.0.0.1:9001") == tmp_path / "a"
    assert where("http://127.0.0.1:9002") == tmp_path / "b"
    assert where("http://127.0.0.1:9002", str(tmp_path / "c")) == tmp_path / "c"
    assert where("http://127.0.0.1:9003") == tmp_path / "default"
