"""Issue 39: a fit's data is one frozen ``FitInputs``, made once by one adapter per data kind.

Real TensorFlow in this one process; N processes are N threads of it (``ThreadRanks``:
its allgather meets at a barrier), so the collectives the adapters make, and what each
rank ends up with, are seen without starting a process. What N real processes then
train: tests/e2e/test_same_on_n.py.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

from det_sdk.distributed import Processes, SingleProcess
from det_sdk.errors import UsageError
from det_sdk.keras import _data
from det_sdk.keras._fit_inputs import fit_inputs
from det_sdk.keras._plan import FitCall


class ThreadRanks(Processes):
    """One rank of N threads; ``gathered``: what it gave to each allgather, in order."""

    def __init__(self, rank: int, size: int, slots: list[Any], barrier: threading.Barrier):
        self.rank, self.size = rank, size
        self.local_rank, self.local_size, self.cross_rank, self.cross_size = rank, size, 0, 1
        self.slots, self.barrier = slots, barrier
        self.gathered: list[Any] = []

    def allgather(self, obj: Any) -> list[Any]:
        self.gathered.append(obj)
        self.slots[self.rank] = obj
        self.barrier.wait()
        out = list(self.slots)
        self.barrier.wait()  # every rank has read before the next allgather writes
        return out

    def broadcast(self, obj: Any, root: int = 0) -> Any:
        return self.allgather(obj)[root]


def _on_ranks(size: int, fn: Callable[[ThreadRanks], Any]
              ) -> tuple[list[ThreadRanks], list[Any], list[BaseException | None]]:
    """``fn`` on every rank at once: (the ranks, their results, their errors)."""
    barrier, slots = threading.Barrier(size, timeout=30), [None] * size
    ranks = [ThreadRanks(r, size, slots, barrier) for r in range(size)]
    results: list[Any] = [None] * size
    errors: list[BaseException | None] = [None] * size

    def run(r: int) -> None:
        try:
            results[r] = fn(ranks[r])
        except BaseException as err:  # the test reads it
            errors[r] = err  # (a rank left waiting for it breaks at the barrier's timeout)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return ranks, results, errors


def _xy(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 3)).astype("float32"), rng.normal(size=(n, 1)).astype("float32")


class Batches(tf.keras.utils.Sequence):
    def __init__(self, n: int = 3) -> None:
        super().__init__()
        self.x, self.y = _xy(4 * n)

    def __len__(self) -> int:
        return len(self.x) // 4

    def __getitem__(self, i: int) -> Any:
        return self.x[4 * i:4 * i + 4], self.y[4 * i:4 * i + 4]


def _dataset(batches: int) -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices(_xy(2 * batches)).batch(2)


def _generator() -> Any:
    x, y = _xy(4)
    while True:
        yield x, y


@pytest.mark.parametrize(("make", "kind"), [
    (lambda: _xy(4)[0], "ArrayAdapter"),
    (lambda: {"a": _xy(4)[0], "b": _xy(4)[1]}, "ArrayAdapter"),
    (lambda: list(_xy(4)), "ArrayAdapter"),
    (lambda: _data.wrap_data(SingleProcess(), _xy(4)[0]), "ArrayAdapter"),
    (Batches, "KerasSequenceAdapter"),
    (lambda: _dataset(2), "TFDatasetAdapter"),
    (_generator, "GeneratorAdapter"),
    (lambda: None, "NoData"),
])
def test_one_adapter_per_data_kind(make: Callable[[], Any], kind: str) -> None:
    inputs = fit_inputs(SingleProcess(), {"x": make()})
    assert type(inputs.train).__name__ == kind
    assert inputs.first_padding is None  # one process: nothing to pad


def test_the_data_keywords_leave_the_fits_and_are_frozen() -> None:
    x, y = _xy(10)
    kwargs = {"x": x, "y": y, "epochs": 3, "verbose": 0, "validation_freq": 2,
              "x_val": x[:2], "y_val": y[:2], "class_weight": {0: 1.0}, "shuffle": False}
    inputs = fit_inputs(SingleProcess(), kwargs)
    assert kwargs == {"epochs": 3, "verbose": 0, "validation_freq": 2}
    assert inputs.train.class_weight == {0: 1.0}  # det_sdk's pipeline applies it
    assert "class_weight" not in inputs.train.data
    assert inputs.validation is not None and inputs.validation.parts[0].shape == (2, 3)
    with pytest.raises(TypeError):
        inputs.train.data["x"] = x  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        inputs.first_padding = 1  # type: ignore[misc]


def test_a_datasets_class_weight_stays_for_keras() -> None:
    inputs = fit_inputs(SingleProcess(), {"x": _dataset(2), "class_weight": {0: 2.0}})
    assert inputs.train.data["class_weight"] == {0: 2.0} and inputs.train.class_weight is None


def test_a_calls_inputs_start_at_its_batch() -> None:
    x, y = _xy(10)
    inputs = fit_inputs(SingleProcess(), {"x": x, "y": y, "batch_size": 4})
    assert inputs.steps_per_epoch() == 3
    whole = inputs.call_inputs(FitCall(0, 1, 0, None, [1]), seed=7)
    late = inputs.call_inputs(FitCall(0, 1, 1, None, [1]), seed=7)
    assert (late["steps_per_epoch"], late["batch_size"], late["shuffle"], late["y"]) == (
        2, None, False, None)
    assert late["validation_batch_size"] == 4 and late["validation_freq"] == [1]
    first_of_late = next(iter(late["x"]))[0].numpy()
    np.testing.assert_array_equal(first_of_late, list(whole["x"])[1][0].numpy())

    ds = fit_inputs(SingleProcess(), {"x": _dataset(5)})
    assert ds.call_inputs(FitCall(0, 1, 0, None, [1]), seed=7).keys() == {"x", "validation_freq"}
    resumed = ds.call_inputs(FitCall(0, 1, 2, None, [1]), seed=7)
    # the dataset as it is: its position is put back into Keras's iterator (PipelinePosition)
    assert resumed["steps_per_epoch"] == 3 and resumed["x"] is ds.train.x
    assert ds.pipeline is not None and inputs.pipeline is None


def test_what_each_kind_refuses() -> None:
    with pytest.raises(UsageError, match="validation_split works with numpy arrays only"):
        fit_inputs(SingleProcess(), {"x": _dataset(2), "validation_split": 0.5})
    with pytest.raises(UsageError, match=r"validation_split must be in \(0, 1\), got 1.5"):
        fit_inputs(SingleProcess(), {"x": _xy(4)[0], "validation_split": 1.5})
    with pytest.raises(UsageError, match="cannot build the model from this input"):
        fit_inputs(SingleProcess(), {"x": _generator()}).sample_input()
    x, y = _xy(4)
    numpy_steps = fit_inputs(SingleProcess(), {"x": x, "y": y, "steps_per_epoch": 2})
    assert numpy_steps.steps_per_epoch() == 2  # the plan counts them; the call refuses
    with pytest.raises(UsageError, match="steps_per_epoch is not supported with numpy input"):
        numpy_steps.call_inputs(FitCall(0, 1, 0, None, [1]), seed=0)
    with pytest.raises(UsageError, match=r"x \(the training data\) is required"):
        fit_inputs(SingleProcess(), {}).call_inputs(FitCall(0, 1, 0, None, [1]), seed=0)


def test_three_ranks_without_a_batch_size_are_refused_before_any_collective() -> None:
    ranks, _, errors = _on_ranks(3, lambda d: fit_inputs(d, {"x": _xy(6)[0]}))
    assert all(isinstance(e, UsageError) and "shard_batch_size" in str(e) for e in errors)
    assert all(r.gathered == [] for r in ranks)


def test_two_ranks_pad_their_own_arrays_to_the_most_rows() -> None:
    def shape(d: ThreadRanks) -> Any:
        x, y = _xy(5 if d.rank == 0 else 3, seed=d.rank)
        inputs = fit_inputs(d, {"x": x, "y": y, "batch_size": 2})
        steps = inputs.steps_per_epoch()
        call = inputs.call_inputs(FitCall(0, 1, 0, None, [1]), seed=3)
        return inputs, steps, call

    ranks, results, errors = _on_ranks(2, shape)
    assert errors == [None, None]
    (a, steps_a, call_a), (b, steps_b, call_b) = results
    assert (a.train.padded, b.train.padded, steps_a, steps_b) == (5, 5, 3, 3)
    assert (a.first_padding, b.first_padding) == (None, 2)  # rank 1's third step: padding
    assert (call_a["steps_per_epoch"], call_b["steps_per_epoch"]) == (3, 3)
    # whether the arrays are alike (no: each rank's own), the rows agreed once while
    # shaping, then the steps
    assert [sorted(r.gathered[0]) for r in ranks] == [["x", "y"], ["x", "y"]]
    assert [r.gathered[1:] for r in ranks] == [[5, 3], [3, 3]]
    # rank 1's 3 rows in 3 steps of 2: its last step trains one padding row (its gradients
    # are zeroed: the batches carry no weights, as Keras would pass them)
    assert [int(x.shape[0]) for x, _ in call_b["x"]] == [2, 1, 1]


def test_arrays_alike_on_every_rank_and_not_wrapped_are_shared_out_as_wrap_data_would(
        ) -> None:
    """A one-process script run on N: fit(x, y) with the same arrays on every rank trains
    one process's epoch (each rank its part of every global batch), not every row on
    every rank; arrays that differ stay each rank's own (the test above)."""
    x, y = _xy(10)

    def batches(d: Processes, batch_size: int) -> tuple[int | None, list[np.ndarray]]:
        inputs = fit_inputs(d, {"x": x.copy(), "y": y.copy(), "batch_size": batch_size})
        call = inputs.call_inputs(FitCall(0, 1, 0, None, [1]), seed=3)
        return inputs.steps_per_epoch(), [np.asarray(b[0]) for b in call["x"]]

    one_steps, one = batches(SingleProcess(), 4)
    _, results, errors = _on_ranks(2, lambda d: batches(d, 2))
    assert errors == [None, None]
    assert [steps for steps, _ in results] == [one_steps, one_steps] == [3, 3]
    for k, whole in enumerate(one):  # the ranks' rows of step k are one process's
        both = np.concatenate([parts[k] for _, parts in results if len(parts[k])])
        assert sorted(map(tuple, both.tolist())) == sorted(map(tuple, whole.tolist()))


def test_two_ranks_even_out_their_datasets() -> None:
    ranks, results, errors = _on_ranks(
        2, lambda d: fit_inputs(d, {"x": _dataset(3 if d.rank == 0 else 2)}))
    assert errors == [None, None]
    a, b = results
    assert [int(i.train.data["x"].cardinality()) for i in results] == [3, 3]
    assert (a.first_padding, b.first_padding) == (None, 2)
    # the first batches' digests (issue 49: not the same on every rank), then the counts
    assert [r.gathered[-1] for r in ranks] == [3, 2]
    last = list(b.train.data["x"])[-1]
    assert last[2].numpy().tolist() == [0.0, 0.0]  # the filler batch weighs nothing


def test_ranks_with_different_steps_are_refused_before_the_call() -> None:
    def call(d: ThreadRanks) -> Any:
        inputs = fit_inputs(d, {"x": _generator(), "steps_per_epoch": 4 + d.rank})
        return inputs.call_inputs(FitCall(0, 1, 0, None, [1]), seed=0)

    _, _, errors = _on_ranks(2, call)
    assert all(isinstance(e, UsageError) and "(rank 0: 4, rank 1: 5)" in str(e) for e in errors)
