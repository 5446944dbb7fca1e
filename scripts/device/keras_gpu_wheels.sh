#!/bin/bash
# The wheels scripts/device/keras_gpu_check.sh installs on a GPU machine (which has JAX and
# PyTorch with CUDA, no TensorFlow, no network): Keras and det_sdk's small dependencies, at
# the versions of this checkout's .venv, into .whl/ (git-ignored; give it to the device
# tool's run as carry: [".whl"]). Run here, with network:
#   bash scripts/device/keras_gpu_wheels.sh            # for Python 3.10, 3.11, 3.12
#   PY_VERSIONS="3.11" bash scripts/device/keras_gpu_wheels.sh
# keras_gpu_check.sh installs only those the machine lacks (keras always), from the
# wheels that match its Python.
set -eu
PY=${PY:-.venv/bin/python}
DEST=${DEST:-.whl}
PY_VERSIONS=${PY_VERSIONS:-3.10 3.11 3.12}
# keras and its pure-Python dependencies, det_sdk's (pyproject.toml) and theirs
PURE="keras namex rich markdown-it-py mdurl pygments absl-py pydantic annotated-types
typing-inspection typing-extensions httpx httpcore h11 anyio idna certifi packaging"
# with compiled parts: one wheel per Python version
BINARY="pydantic-core xxhash pyyaml optree h5py"
mkdir -p "$DEST"
pinned() {  # "name==version" of each installed distribution named in $1
  "$PY" - "$1" <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, version
for name in sys.argv[1].split():
    try:
        print(f"{name}=={version(name)}")
    except PackageNotFoundError:
        print(f"not installed, left out: {name}", file=sys.stderr)
PY
}
# shellcheck disable=SC2046  # one word per requirement
"$PY" -m pip download -q --no-deps --only-binary=:all: --dest "$DEST" $(pinned "$PURE")
for v in $PY_VERSIONS; do
  # shellcheck disable=SC2046
  "$PY" -m pip download -q --no-deps --only-binary=:all: --dest "$DEST" \
    --python-version "$v" --implementation cp --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    $(pinned "$BINARY")
done
find "$DEST" -name "*.whl" | wc -l
du -sh "$DEST"
