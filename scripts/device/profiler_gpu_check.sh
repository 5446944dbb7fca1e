#!/bin/bash
# The profiler's GPU metrics (det_sdk.profiler, issue 60) read from a real GPU through NVML
# during a PyTorch Trainer fit, on a GPU machine lent by the device tool (not CI, which has
# no GPU; the unit tests use a test double of NVML). Run from the repository root, with the
# wheels of what the machine lacks in .whl/ (nvidia-ml-py, psutil, pydantic, pydantic_core,
# annotated_types, typing_inspection for its Python):
#   bash scripts/device/profiler_gpu_check.sh
# It prints PASS or FAIL and the GPU figures for docs/benchmarks.md; logs go to $OUT (the
# device tool's folder that comes back), else /tmp/gpu-check. Written, not yet run.
set -u
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
nvidia-smi -L
python3 -c "import pynvml, torch; print('nvml ok; torch', torch.__version__, 'cuda', torch.cuda.is_available())"
timeout 300 python3 scripts/device/profiler_gpu_fit.py "$OUT" 2>&1 | tee "$OUT/profiler_gpu.log" | tail -30
