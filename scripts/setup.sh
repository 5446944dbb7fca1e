#!/usr/bin/env bash
# Set up det_sdk for development in ./.venv, safe to re-run: every step is
# skipped when what it would install is already there.
#
#   bash scripts/setup.sh          # venv + TensorFlow + Horovod + det_sdk (editable, dev tools)
#   bash scripts/setup.sh --train  # the same, then a first local training run of examples/train.py
#
# Horovod is not a plain dependency of the package: it compiles against the
# TensorFlow already installed, so it must come after TF and without build
# isolation (see DESIGN.md for the measured pair TF 2.15.1 + Horovod 0.28.1).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
TF_PIN="tensorflow-cpu==2.15.1"
HOROVOD_PIN="horovod==0.28.1"

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
PY=.venv/bin/python
export PIP_DISABLE_PIP_VERSION_CHECK=1

if ! $PY -c "import tensorflow" >/dev/null 2>&1; then
  say "installing $TF_PIN"
  $PY -m pip install -q "$TF_PIN" "numpy<2" "protobuf<5" setuptools wheel
fi

if ! $PY -c "import horovod.tensorflow" >/dev/null 2>&1; then
  say "building $HOROVOD_PIN against TensorFlow (about 2 minutes the first time; pip caches the wheel)"
  # cmake from PyPI (4.x) breaks Horovod's build: use the system cmake 3.x.
  command -v cmake >/dev/null || { echo "setup: Horovod needs cmake 3.x and a C++ compiler on PATH" >&2; exit 1; }
  HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
    HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 MAKEFLAGS=-j2 \
    $PY -m pip install -q --no-build-isolation "$HOROVOD_PIN"
fi

if ! $PY -c "import det_sdk, pytest, ruff" >/dev/null 2>&1 \
   || [ pyproject.toml -nt .venv/.det_sdk_installed ]; then
  say "installing det_sdk (editable) with its dev tools"
  $PY -m pip install -q --no-build-isolation -e ".[dev]"
  touch .venv/.det_sdk_installed
fi

say "ready: $($PY -c 'import tensorflow as tf, horovod, det_sdk; print(f"tensorflow {tf.__version__}, horovod {horovod.__version__}, det_sdk {det_sdk.__version__}")' 2>/dev/null)"

if [ "${1:-}" = "--train" ]; then
  # No network here for keras.datasets.mnist: train on a small MNIST-shaped
  # file instead (on a laptop with internet, plain `python examples/train.py`
  # downloads the real MNIST).
  mkdir -p det-runs
  [ -f det-runs/mnist-demo.npz ] || $PY scripts/make_mnist_npz.py det-runs/mnist-demo.npz
  say "training examples/train.py locally on det-runs/mnist-demo.npz"
  MNIST_NPZ=det-runs/mnist-demo.npz $PY examples/train.py
fi
