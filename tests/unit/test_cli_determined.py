"""Determined 0.38.1's daily `det` command lines parse as the compatibility table says
(issue 48): each `same` / `different` form parses to a command, each `refused` one stops
with det_sdk's reason, each `not built` one is no form of det's. The table's data and
its generator: scripts/determined_cli_table.py; its output is in docs/determined-compat.md.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from det_sdk.cli.common import parse_ids, parse_overrides
from det_sdk.cli.logs_cmd import first_lines, last_lines
from det_sdk.cli.main import build_parser
from det_sdk.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("determined_cli_table",
                                               ROOT / "scripts" / "determined_cli_table.py")
assert _spec is not None and _spec.loader is not None
table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(table)


@pytest.mark.parametrize(("line", "status"), [(line, status) for line, status, _ in table.FORMS])
def test_each_determined_form_does_what_the_table_says(line: str, status: str) -> None:
    assert table.outcome(line) == table.EXPECTED[status], f"{line}: {status}"


def test_the_docs_table_is_the_generated_one() -> None:
    assert table.table() in (ROOT / "docs" / "determined-compat.md").read_text()


def test_determined_defaults() -> None:
    def parse(line: str):
        words = line.split()
        return build_parser(words).parse_args(words)

    listed = parse("e list")
    assert (listed.limit, listed.offset, listed.pages, listed.all) == (200, 0, "all", False)
    assert parse("c download U").output_dir is None  # -> checkpoints/U
    assert parse("e download 1").output_dir == "checkpoints"
    assert parse("t download 1 --best").output_dir is None
    created = parse("e create c.yaml --config a=1 --config b.c=x -f --paused")
    assert created.model_def is None and created.config == ["a=1", "b.c=x"]
    assert created.follow_first_trial and created.paused
    # argparse's abbreviation, as in Determined: --follow is --follow-first-trial
    assert parse("e create c.yaml . --follow").follow_first_trial


def test_comma_lists_overrides_and_log_slices() -> None:
    assert parse_ids("3,1,2") == [3, 1, 2]
    with pytest.raises(UsageError, match="comma"):
        parse_ids("1;2")
    assert parse_overrides({"searcher": {"name": "single"}},
                           ["searcher.max_length.epochs=2", "labels=[a, b]"]) == {
        "searcher": {"name": "single", "max_length": {"epochs": 2}}, "labels": ["a", "b"]}
    with pytest.raises(UsageError, match="KEY=VALUE"):
        parse_overrides({}, ["novalue"])
    log = "a\nb\nc\n"
    assert (first_lines(log, 2), last_lines(log, 2), last_lines(log, 0)) == ("a\nb\n",
                                                                             "b\nc\n", "")


def test_tensorboard_forms(capsys: pytest.CaptureFixture[str]) -> None:
    def parse(line: str):
        words = line.split()
        return build_parser(words).parse_args(words)

    started = parse("tensorboard start 1 2 -t 5 6 --no-browser --config description=x")
    assert (started.experiment_ids, started.trial_ids, started.no_browser, started.detach,
            started.config) == ([1, 2], [5, 6], True, False, ["description=x"])
    assert parse("tensorboard start -t 5").experiment_ids == []
    assert parse("tensorboard kill a b -f").tensorboard_id == ["a", "b"]
    listed = parse("tensorboard ls -a -q")
    assert (listed.all, listed.quiet, listed.json, listed.csv) == (True, True, False, False)
    # det_sdk's foreground form has a verb of its own: it cannot be taken for `start`
    ran = parse("tensorboard run 3 4 --port 0")
    assert (ran.experiment_ids, ran.port, ran.func.__name__) == ([3, 4], 0, "tensorboard")
    assert parse("tensorboard run --runs-dir det-runs").runs_dir == "det-runs"
    with pytest.raises(SystemExit):
        parse("tensorboard 3")  # the form before Determined's verbs: says what to use
    err = capsys.readouterr().err
    assert "det tensorboard start EXP_ID" in err and "det tensorboard run EXP_ID" in err
