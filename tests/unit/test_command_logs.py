"""A command's log read 1 MiB at a time (issue 58): pieces end at whole UTF-8 characters,
so the text a follower joins is the text the command wrote, in any language; and the
config a command is queued with is checked field by field."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from det_sdk.config import ConfigError
from det_sdk.config.command import parse_command_config
from det_sdk.master.commands import read_log_chunk, whole_characters


def _follow(path: Path, size: int) -> str:
    text, offset = "", 0
    while True:
        chunk = read_log_chunk(path, offset, size=size)
        if not chunk["text"]:
            return text
        text += chunk["text"]
        offset = chunk["offset"]


@pytest.mark.parametrize("size", [4, 5, 7, 64, 1000])
def test_pieces_join_to_the_text_written(tmp_path: Path, size: int) -> None:
    rng = random.Random(size)
    alphabet = ["a", "\n", "\u00e9", "\u20ac", "\u4e2d", "\U0001f600"]  # 1 to 4 bytes
    written = "".join(rng.choice(alphabet) for _ in range(3000))
    log = tmp_path / "logs.txt"
    log.write_text(written, encoding="utf-8")
    followed = _follow(log, size)
    assert followed == written
    assert "\ufffd" not in followed


def test_whole_characters_keeps_what_is_whole() -> None:
    euro = "\u20ac".encode()  # 3 bytes
    assert whole_characters(b"ab" + euro) == b"ab" + euro
    assert whole_characters(b"ab" + euro[:2]) == b"ab"
    assert whole_characters(b"ab" + euro[:1]) == b"ab"
    assert whole_characters(b"") == b""
    # bytes that are not UTF-8 at all are passed on (decoded with replacement)
    assert whole_characters(b"\x80\x80\x80\x80\x80") == b"\x80\x80\x80\x80\x80"


def test_a_missing_log_is_empty(tmp_path: Path) -> None:
    assert read_log_chunk(tmp_path / "none.txt", 5) == {"text": "", "offset": 5}


@pytest.mark.parametrize(("config", "field"), [
    ({}, "entrypoint"),
    ({"entrypoint": []}, "entrypoint"),
    ({"entrypoint": ["a\x00b"]}, "NUL"),
    ({"entrypoint": "x", "resources": {"slots": 4097}}, "resources.slots"),
    ({"entrypoint": "x", "resources": {"slots": True}}, "resources.slots"),
    ({"entrypoint": "x", "work_dir": "/w"}, "work_dir"),
    ({"entrypoint": "x", "environment": {"environment_variables": ["DET_MASTER=x"]}},
     "DET_MASTER"),
    ({"entrypoint": "x", "hyperparameters": {"lr": {"type": "double", "minval": 0,
                                                     "maxval": 1}}}, "no searcher"),
])
def test_a_bad_command_config_names_its_field(config: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        parse_command_config(config)


def test_a_command_config_as_determined_writes_it() -> None:
    cfg = parse_command_config({
        "entrypoint": ["python3", "x.py", "--name", "a b"], "description": "d",
        "resources": {"slots": 0}, "environment": {"image": "ignored:latest",
                                                   "environment_variables": ["A=1"]},
        "hyperparameters": {"lr": {"type": "const", "val": 0.1}, "opt": {"m": 0.9}}})
    assert cfg.command_line() == "python3 x.py --name 'a b'"
    assert cfg.resources.slots == 0 and cfg.environment.variables == {"A": "1"}
    assert cfg.hyperparameters == {"lr": 0.1, "opt": {"m": 0.9}}
