"""plan_calls: the model.fit calls between a position and a target (pure arithmetic)."""

from __future__ import annotations

import pytest

pytest.importorskip("tensorflow")

from det_sdk.config import Length
from det_sdk.keras._plan import plan_calls

# Stack-neutral: plan_calls is pure arithmetic.
pytestmark = pytest.mark.stack_neutral


def _plan(epoch, batch, target, steps, period=None):
    return [(c.initial_epoch, c.epochs, c.start_batch, c.stop_at, c.validate_epochs)
            for c in plan_calls(epoch, batch, target=target, steps_per_epoch=steps,
                                validation_period=period)]


def test_whole_epochs_are_one_call_validated_every_epoch() -> None:
    assert _plan(0, 0, Length(epochs=3), 10) == [(0, 3, 0, None, [1, 2, 3])]


def test_a_length_in_batches_ends_mid_epoch() -> None:
    assert _plan(0, 0, Length(batches=25), 10) == [(0, 3, 0, (2, 5), [1, 2, 3])]


def test_resuming_mid_epoch_finishes_that_epoch_first() -> None:
    assert _plan(1, 3, Length(epochs=3), 10) == [(1, 2, 3, None, [2]), (2, 3, 0, None, [3])]


def test_a_batch_period_cuts_calls_where_it_falls_inside_an_epoch() -> None:
    assert _plan(0, 0, Length(epochs=2), 10, Length(batches=4)) == [
        (0, 1, 0, (0, 4), [1]), (0, 1, 4, (0, 8), [1]), (0, 1, 8, None, []),
        (1, 2, 0, (1, 2), [2]), (1, 2, 2, (1, 6), [2]), (1, 2, 6, None, [2]),
    ]


def test_a_batch_period_of_whole_epochs_needs_no_cut() -> None:
    assert _plan(0, 0, Length(epochs=4), 10, Length(batches=20)) == [(0, 4, 0, None, [2, 4])]


def test_an_epoch_period_validates_its_epochs_and_the_last() -> None:
    assert _plan(0, 0, Length(epochs=5), 10, Length(epochs=2)) == [(0, 5, 0, None, [2, 4, 5])]
    assert _plan(0, 0, Length(epochs=5), None, Length(epochs=2)) == [(0, 5, 0, None, [2, 4, 5])]


def test_already_at_the_target_plans_nothing() -> None:
    assert _plan(2, 0, Length(epochs=2), 10) == []
    assert _plan(2, 5, Length(batches=25), 10) == []


def test_unknown_epoch_length_refuses_batches_with_the_reason() -> None:
    with pytest.raises(ValueError, match="length in batches needs input of known length"):
        _plan(0, 0, Length(batches=5), None)
    with pytest.raises(ValueError, match="min_validation_period in batches"):
        _plan(0, 0, Length(epochs=2), None, Length(batches=5))
