#!/bin/bash
# det_sdk.pytorch's CUDA path, on a GPU machine lent by the device tool (not CI, which has
# no GPU). Run from the repository root, with the wheels of what the machine lacks in
# .whl/ (pydantic, pydantic_core, annotated_types, typing_inspection for its Python):
#   bash scripts/device/pytorch_gpu_check.sh
# Logs go to $OUT (the device tool's folder that comes back), else /tmp/gpu-check.
set -u
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
nvidia-smi -L
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.device_count())"

echo "== 1. the PyTorch fronts' in-process tests, on the GPU"
timeout 200 python3 -m pytest -q -p no:cacheprovider -o addopts="" \
  tests/integration/test_pytorch.py tests/integration/test_pytorch_script.py \
  tests/integration/test_pytorch_predict_stream.py tests/integration/test_torch_batch_process.py \
  tests/integration/test_torch_batch_process_iterable.py 2>&1 | tee "$OUT/integration.log" | tail -25

echo "== 2. SIGTERM mid-epoch and resume on the GPU (dropout: the CUDA RNG), bit-equal"
timeout 200 python3 -m pytest -q -p no:cacheprovider -o addopts="" \
  "tests/e2e/test_pytorch.py::test_sigterm_mid_epoch_and_resume_is_bit_equal[1-local]" \
  2>&1 | tee "$OUT/resume.log" | tail -25

echo "== 3. two processes on one GPU: refused, naming what to change"
python3 - <<'PY' 2>&1 | tee "$OUT/two_on_one.log" | tail -12
import os, subprocess, sys, tempfile
sys.path.insert(0, "tests/pytorch_mnist")
import make_data
d = tempfile.mkdtemp()
make_data.make(f"{d}/d.npz")
import torch
n = torch.cuda.device_count() + 1
p = subprocess.run([sys.executable, "-m", "det_sdk.launch.torch_distributed", "--nproc-per-node",
                    str(n), sys.executable, "tests/pytorch_mnist/train_local.py",
                    f"{d}/out.pth", "5"],
                   capture_output=True, text=True, timeout=120,
                   env={**os.environ, "PT_NPZ": f"{d}/d.npz", "DET_RUNS_DIR": f"{d}/runs"})
print("rc", p.returncode)
print("refused as expected" if "has none" in p.stderr else "NOT REFUSED")
print(p.stderr[-1500:])
PY
