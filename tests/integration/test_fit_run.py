"""FitRun: one fit's position (its one owner), History, validation and save decisions."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

from det_sdk.engine.position import Position
from det_sdk.keras._fit_run import FitRun

PACKAGE = Path(__file__).resolve().parents[2] / "det_sdk"


def _run(start: Position | None = None) -> FitRun:
    return FitRun(None, None, checkpoints=False, start=start)  # type: ignore[arg-type]


def test_a_call_that_starts_mid_epoch_counts_on_from_the_resumed_batch() -> None:
    run = _run(Position(epoch=2, batch=3, steps_completed=23))
    run.epoch_begins(2)
    run.batch_ends(3)  # callbacks see the epoch's indices (ResumedEpoch), from 3 on
    assert run.position == Position(2, 4, 24)
    for b in range(4, 10):  # the 7 batches left of 10
        run.batch_ends(b)
    run.epoch_ends(2, steps=10)
    assert run.position == Position(3, 0, 30)


def test_steps_per_execution_skipping_batch_indices_still_counts_every_step() -> None:
    run = _run()
    run.epoch_begins(0)
    run.batch_ends(3)  # Keras reports every 4th batch
    run.batch_ends(7)
    assert (run.batch, run.steps_completed) == (8, 8)


def test_an_epoch_stopped_inside_stays_current_for_the_next_call() -> None:
    run = _run()
    run.epoch_begins(0)
    for b in range(5):
        run.batch_ends(b)
    run.epoch_ends(0, steps=10)  # StopAt ended the call after 5 of 10 batches
    assert run.position == Position(0, 5, 5)
    assert run.reached((0, 5)) and not run.reached((0, 6)) and not run.reached(None)
    run.epoch_begins(0)  # the next call resumes the epoch at batch 5
    run.batch_ends(5)
    assert run.position == Position(0, 6, 6)


def test_validation_and_history_are_the_runs_own() -> None:
    run = FitRun(None, None, checkpoints=False,  # type: ignore[arg-type]
                 past={"history": {"loss": [0.9]}, "epoch": [0]},
                 start=Position(1, 0, 10), last_validation={"val_loss": 0.8})
    assert run.last_validation == {"val_loss": 0.8} and not run.validated_here
    run.record_epoch(1, {"loss": 0.5, "val_loss": 0.4, "note": "not a number"})
    run.validated({"val_loss": 0.4})
    assert run.history.history == {"loss": [0.9, 0.5], "val_loss": [0.4]}
    assert run.history.epoch == [0, 1]
    assert run.validated_here
    run.batch_ends(0)
    assert not run.validated_here  # trained since


def test_a_fit_without_checkpoints_saves_nothing() -> None:
    assert _run().save() is None


def test_positions_are_values() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Position(0, 0, 0).batch = 1  # type: ignore[misc]


def test_only_the_fit_run_moves_the_position() -> None:
    """The Keras front's callbacks and loops read the position from the FitRun; the
    methods that move it are called from TrackPosition alone."""
    movers = {"epoch_begins", "batch_ends", "epoch_ends"}
    callers: dict[str, set[str]] = {}
    for path in (PACKAGE / "keras").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in movers:
                callers.setdefault(str(path.relative_to(PACKAGE)), set()).add(node.func.attr)
    assert callers == {"keras/_callbacks/position.py": movers}
