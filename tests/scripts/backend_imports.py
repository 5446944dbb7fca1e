"""What ``det.keras.init()`` imports on each Keras backend (tests/e2e/test_backend_imports.py).

Prints one JSON line ``BACKEND_IMPORTS {...}``: the frameworks loaded after
``import det_sdk.keras`` and after ``det.keras.init()``, and every attempt to import one of
them with the file that made it.

``BACKEND_IMPORTS_HIDE=tensorflow,horovod`` makes those packages absent, as in an
environment installed with ``pip install 'det_sdk[jax]'`` or ``'det_sdk[torch]'``: an import
of one raises ``ModuleNotFoundError`` and ``importlib.util.find_spec`` finds none. Keras 3
itself imports TensorFlow wherever it is installed (``keras.utils.set_random_seed`` seeds
it too), so only an environment without it shows whether det_sdk needs it.
``BACKEND_IMPORTS_FIT=1``: also one epoch of a tiny model, with its checkpoint.
``BACKEND_IMPORTS_RUNS_DIR``: the runs directory (default: a new temporary one).
"""

import importlib
import json
import os
import sys
import tempfile
from pathlib import Path
from types import FrameType

WATCHED = ("tensorflow", "horovod", "jax", "torch", "keras")
HIDDEN = {n for n in os.environ.get("BACKEND_IMPORTS_HIDE", "").split(",") if n}
_IMPORTLIB = (os.path.dirname(importlib.__file__) + os.sep, "<frozen")
_UTIL = ("<frozen importlib.util>", os.path.join(os.path.dirname(importlib.__file__), "util.py"))
attempts: list[dict[str, object]] = []


def _importer() -> str:
    """The innermost frame outside the import machinery: the file whose import this is."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_IMPORTLIB):
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


def _probing() -> bool:
    """True inside ``importlib.util.find_spec`` (a check whether a package is installed)."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "find_spec" and frame.f_code.co_filename in _UTIL:
            return True
        frame = frame.f_back
    return False


class Watcher:
    """First on ``sys.meta_path``: records each first import of a watched package, and
    makes the hidden ones absent."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name not in WATCHED:
            return None
        probe = _probing()
        attempts.append({"name": name, "by": _importer(), "probe": probe})
        if name in HIDDEN and not probe:
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by the test)",
                                      name=name)
        return None


sys.meta_path.insert(0, Watcher())


def loaded() -> dict[str, bool]:
    return {n: sys.modules.get(n) is not None for n in WATCHED}


import det_sdk as det  # noqa: E402
import det_sdk.keras  # noqa: E402

after_import = loaded()
runs = os.environ.get("BACKEND_IMPORTS_RUNS_DIR") or tempfile.mkdtemp(prefix="backend-imports-")
context = det.keras.init(hparams={"global_batch_size": 8}, runs_dir=runs, seed=7)
after_init = loaded()
if os.environ.get("BACKEND_IMPORTS_FIT") == "1":
    import keras
    import numpy as np

    x = np.random.default_rng(0).normal(size=(16, 3)).astype("float32")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=context.wrap_optimizer(keras.optimizers.SGD(0.1)), loss="mse")
    context.fit(model, *context.wrap_data(x, x[:, :1]), batch_size=8, epochs=1, verbose=0)
context.close()
det_dir = str(Path(det.__file__).parent) + os.sep
print("BACKEND_IMPORTS " + json.dumps({
    "backend": det.keras._entry.backend_name(),
    "after_import": after_import, "after_init": after_init, "after_fit": loaded(),
    "attempts": attempts,
    "by_det_sdk": sorted({str(a["name"]) for a in attempts if str(a["by"]).startswith(det_dir)}),
}), flush=True)
