"""What a distiller's checkpoint holds (issue 49, item 10): what its resume needs.

keras-io's knowledge distillation trains a teacher (its own fit, its own optimizer),
then a ``Distiller`` holding teacher and student, compiled with an optimizer for the
student. The distiller's checkpoints hold both models' weights (its loss reads the
teacher's) and the distiller's optimizer, not the teacher's optimizer: the teacher's
fit trained it, the distiller's never steps it. A ``train_step`` that does step an
inner model's own optimizer is refused at the first checkpoint, never resumed
without its state. docs/checkpoints.md says what else a checkpoint holds and why.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

tf = pytest.importorskip("tensorflow")

import det_sdk as det  # noqa: E402
from det_sdk.errors import UsageError  # noqa: E402
from det_sdk.keras import _compat  # noqa: E402
from tests.support import SCRIPTS  # noqa: E402

sys.path.insert(0, str(SCRIPTS))
import custom_models as cm  # noqa: E402

keras = _compat.keras


def _groups(ctx) -> dict[str, int]:
    path = ctx.core.checkpoint.checkpoint_path(ctx.core.checkpoint.latest_checkpoint)
    sizes: dict[str, int] = {}
    for entry in json.loads((path / "state.json").read_text())["arrays"]:
        sizes[entry["group"]] = sizes.get(entry["group"], 0) + 1
    return sizes


def _trained_teacher_and_distiller(ctx, distiller_class=cm.Distiller):
    x, y = cm.data()
    distiller = cm.make_distiller()
    teacher = distiller.teacher
    teacher.compile(ctx.wrap_optimizer(keras.optimizers.Adam(0.01)),
                    keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    ctx.fit(teacher, x=x, y=y, batch_size=16, epochs=1, verbose=0, stage="teacher")
    distiller = distiller_class(distiller.student, teacher)
    cm.compile_distiller(distiller, ctx)
    return distiller, x, y


def test_a_distillers_checkpoint_leaves_the_teachers_own_optimizer_out(tmp_path: Path) -> None:
    ctx = det.keras.init(runs_dir=tmp_path, seed=1)
    distiller, x, y = _trained_teacher_and_distiller(ctx)
    ctx.fit(distiller, x=x, y=y, batch_size=16, epochs=1, verbose=0, stage="student")
    groups = _groups(ctx)
    teacher_vars = len(distiller.teacher.weights)
    assert groups["model"] == teacher_vars + len(distiller.student.weights)
    assert "optimizer:1" not in groups  # the teacher's Adam: its own fit's state
    assert groups["optimizer:0"] == len(_compat.optimizer_variables(
        distiller.optimizer, distiller.trainable_variables))


class _StepsTheTeachersOptimizer(cm.Distiller):
    """Trains the teacher too, with the optimizer the teacher was compiled with."""

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.student_loss_fn(y, self.teacher(x, training=True))
        grads = tape.gradient(loss, self.teacher.trainable_weights)
        self.teacher.optimizer.apply_gradients(zip(grads, self.teacher.trainable_weights))
        return super().train_step(data)


def test_an_inner_models_optimizer_stepped_by_the_outer_fit_is_refused(tmp_path: Path) -> None:
    ctx = det.keras.init(runs_dir=tmp_path, seed=1)
    distiller, x, y = _trained_teacher_and_distiller(ctx, _StepsTheTeachersOptimizer)
    with pytest.raises(UsageError, match="inner models' own optimizers"):
        ctx.fit(distiller, x=x, y=y, batch_size=16, epochs=1, verbose=0, stage="student")
