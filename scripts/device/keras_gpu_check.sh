#!/bin/bash
# Keras 3 on JAX and PyTorch through det.keras.init() (issue 57) on a GPU machine lent by
# the device tool (one H200; JAX and PyTorch with CUDA installed, no TensorFlow, no
# network; not CI, which has no GPU). Run from the repository root, with the wheels of
# what the machine lacks in .whl/ (bash scripts/device/keras_gpu_wheels.sh makes them;
# carry: [".whl"]):
#   bash scripts/device/keras_gpu_check.sh
# For each backend: one process (scripts/device/keras_gpu_fit.py, a bigger
# tests/scripts/keras_backend_fit.py), two processes sharing the GPU under torchrun,
# SIGTERM mid-epoch + resume compared bit for bit with the uninterrupted run (the
# deterministic settings), and scripts/bench/keras_backends.py's context.fit vs
# model.fit (and checkpoint) figures. Everything goes to $OUT (the device tool's folder
# that comes back; else /tmp/keras-gpu-check): a log per step, summary.json, summary.md.
# Each step has a timeout, and a step that would start past $BUDGET seconds (default
# 420) is skipped, so the whole stays within about 8 minutes.
#   BACKENDS="jax" bash scripts/device/keras_gpu_check.sh   # one backend only
# (BENCH_ARGS: the benchmark's arguments, default "--reps 3"; PY: the python, python3;
# FIT_ROWS: the rows of the fits, 8192)
set -u
OUT=${OUT:-/tmp/keras-gpu-check}
BUDGET=${BUDGET:-420}
BACKENDS=${BACKENDS:-jax torch}
# rows of keras_gpu_fit.py's runs (64 a global batch; 3 epochs); the SIGTERM comes in the
# second epoch
FIT_ROWS=${FIT_ROWS:-8192}
KILL_AT=$((FIT_ROWS * 3 / 128 + 8))
PY=${PY:-python3}
SITE=${SITE:-/tmp/keras-site}  # the wheels installed
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/keras-gpu.XXXXXX)
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
export PYTHONPATH=$PWD
# two processes on one GPU: neither may take most of its memory at start
export XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_MEM_FRACTION=0.3
# the deterministic settings (for the resume check; everywhere, so runs compare)
export XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }--xla_gpu_deterministic_ops=true"
export CUBLAS_WORKSPACE_CONFIG=:4096:8 DETERMINISTIC=1
RESULTS=$OUT/steps.tsv
: >"$RESULTS"

# step NAME SECONDS COMMAND...: run it with a timeout (bounded by what is left of the
# budget), its output in $OUT/NAME.log; one row "name rc seconds" in steps.tsv
step() {
  local name=$1 limit=$2 left rc t0
  shift 2
  left=$((BUDGET - SECONDS))
  if [ "$left" -lt 20 ]; then
    echo "== $name: skipped (budget of ${BUDGET}s spent)"
    printf '%s\tskipped\t0\n' "$name" >>"$RESULTS"
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (timeout ${limit}s)"
  t0=$SECONDS
  timeout -k 10 "$limit" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" >>"$RESULTS"
  tail -4 "$OUT/$name.log"
  echo "   rc $rc, $((SECONDS - t0))s"
  return "$rc"
}

echo "== 0. what the machine has; the wheels it lacks"
nvidia-smi -L 2>&1 | tee "$OUT/gpu.txt"
if ls .whl/*.whl >/dev/null 2>&1; then
  # keras always (the machine's may be older than 3.10); the others only when missing
  missing=$("$PY" - <<'PY'
import importlib.util
need = {"namex": "namex", "rich": "rich", "markdown_it": "markdown-it-py", "mdurl": "mdurl",
        "pygments": "pygments", "absl": "absl-py", "pydantic": "pydantic",
        "pydantic_core": "pydantic-core", "annotated_types": "annotated-types",
        "typing_inspection": "typing-inspection", "typing_extensions": "typing-extensions",
        "httpx": "httpx", "httpcore": "httpcore", "h11": "h11", "anyio": "anyio",
        "idna": "idna", "certifi": "certifi", "packaging": "packaging", "yaml": "pyyaml",
        "xxhash": "xxhash", "optree": "optree", "h5py": "h5py"}
print(" ".join(d for m, d in need.items() if importlib.util.find_spec(m) is None))
PY
)
  echo "installing keras $missing"
  # shellcheck disable=SC2086  # one word per distribution
  if ! "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$SITE" --find-links .whl keras $missing >"$OUT/install.log" 2>&1; then
    for d in keras $missing; do  # one at a time: install what there are wheels of
      "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" --find-links .whl "$d" >>"$OUT/install.log" 2>&1 \
        || echo "no wheel installed for $d (see install.log)"
    done
  fi
  export PYTHONPATH=$SITE:$PWD
fi
"$PY" - <<'PY' 2>&1 | tee "$OUT/versions.txt"
import importlib, sys
print("python", sys.version.split()[0])
for m in ("keras", "jax", "jaxlib", "torch", "numpy", "pydantic"):
    try:
        print(m, importlib.import_module(m).__version__)
    except Exception as e:  # noqa: BLE001
        print(m, "MISSING", type(e).__name__, e)
try:
    import jax
    print("jax devices", jax.devices())
except Exception as e:  # noqa: BLE001
    print("jax devices: ", e)
import torch
print("torch cuda", torch.cuda.is_available(), torch.cuda.device_count())
PY

FIT=scripts/device/keras_gpu_fit.py
TORCHRUN=(torchrun)
command -v torchrun >/dev/null 2>&1 || TORCHRUN=("$PY" -m torch.distributed.run)

for B in $BACKENDS; do
  W=$WORK/$B
  mkdir -p "$W"
  echo "=== $B"
  # 1. one process, deterministic: the reference of 2. and 3.
  step "$B-1-one-process" 120 env KERAS_BACKEND="$B" DET_RUNS_DIR="$W/one/runs" \
    OUT="$W/one" ROWS="$FIT_ROWS" "$PY" "$FIT"
  # 2. two processes sharing the GPU (without dropout: on PyTorch each process draws
  #    its own masks; compared with a one-process run without dropout)
  step "$B-2a-one-process-nodropout" 90 env KERAS_BACKEND="$B" DET_RUNS_DIR="$W/one0/runs" \
    OUT="$W/one0" ROWS="$FIT_ROWS" DROPOUT=0 "$PY" "$FIT"
  step "$B-2b-two-processes" 150 env KERAS_BACKEND="$B" DET_RUNS_DIR="$W/two/runs" \
    OUT="$W/two" ROWS="$FIT_ROWS" DROPOUT=0 "${TORCHRUN[@]}" --nproc_per_node 2 --standalone "$FIT"
  # 3. SIGTERM inside the second epoch (batch 200 of 128 an epoch by default), resume
  step "$B-3a-sigterm" 90 env KERAS_BACKEND="$B" DET_RUNS_DIR="$W/kill/runs" \
    OUT="$W/killed" ROWS="$FIT_ROWS" KILL_AT=$KILL_AT "$PY" "$FIT"
  step "$B-3b-resume" 90 env KERAS_BACKEND="$B" DET_RUNS_DIR="$W/kill/runs" \
    OUT="$W/resumed" ROWS="$FIT_ROWS" DET_RESUME=latest "$PY" "$FIT"
  if [ "$B" = torch ]; then
    # Keras's unseeded Dropout draws on the GPU from torch's CUDA generator: the same
    # check without dropout tells a CUDA RNG state not carried from anything else
    step "$B-3c-sigterm-nodropout" 90 env KERAS_BACKEND="$B" DET_RUNS_DIR="$W/kill0/runs" \
      OUT="$W/killed0" ROWS="$FIT_ROWS" KILL_AT=$KILL_AT DROPOUT=0 "$PY" "$FIT"
    step "$B-3d-resume-nodropout" 90 env KERAS_BACKEND="$B" DET_RUNS_DIR="$W/kill0/runs" \
      OUT="$W/resumed0" ROWS="$FIT_ROWS" DET_RESUME=latest DROPOUT=0 "$PY" "$FIT"
  fi
  # 4. context.fit vs model.fit, det_sdk's checkpoint vs BackupAndRestore, on the GPU
  # shellcheck disable=SC2086  # BENCH_ARGS: one word per argument
  step "$B-4-bench" 120 env KERAS_BACKEND="$B" "$PY" scripts/bench/keras_backends.py \
    --backend "$B" ${BENCH_ARGS:---reps 3} --json "$OUT/bench_$B.json"
done

echo "== summary"
"$PY" - "$WORK" "$OUT" "$BACKENDS" <<'PY' 2>&1 | tee "$OUT/summary.md"
import json, sys
from pathlib import Path

import numpy as np

work, out, backends = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3].split()
steps = {}
for line in (out / "steps.tsv").read_text().splitlines():
    name, rc, secs = line.split("\t")
    steps[name] = {"rc": rc, "seconds": int(secs)}


def load(b, name):
    try:
        with np.load(work / b / f"{name}.npz") as z:
            weights = [z[f"arr_{i}"] for i in range(len(z.files) - 1)]
        return weights, json.loads((work / b / f"{name}.json").read_text())
    except OSError:
        return None, None


def resumed(stopped, res, res_w, ref, ref_w):
    """The resumed run against the uninterrupted one."""
    if not (res and ref):
        return {"stopped_message": stopped, "resumed": False}
    return {"stopped_message": stopped, "history_equal": res["history"] == ref["history"],
            "weights_bit_equal": all(np.array_equal(a, c) for a, c in zip(res_w, ref_w)),
            "max_weight_diff": max(float(np.max(np.abs(a - c))) for a, c in zip(res_w, ref_w))}


summary = {"steps": steps, "backends": {}}
print("# Keras 3 on the GPU (scripts/device/keras_gpu_check.sh)\n")
print((out / "versions.txt").read_text() if (out / "versions.txt").exists() else "")
for b in backends:
    r = {}
    one_w, one = load(b, "one")
    one0_w, one0 = load(b, "one0")
    two_w, two = load(b, "two")
    res_w, res = load(b, "resumed")
    killed = (out / f"{b}-3a-sigterm.log")
    r["one_process"] = one and {"devices": one["devices"], "steps_per_s": one["steps_per_s"],
                                "history": one["history"]}
    r["on_gpu"] = bool(one) and any("cuda" in d.lower() or "gpu" in d.lower()
                                    for d in one["devices"])
    if two and one0:
        diff = max(float(np.max(np.abs(a - c))) for a, c in zip(two_w, one0_w))
        r["two_processes"] = {"devices": two["devices"], "steps_per_s": two["steps_per_s"],
                              "max_weight_diff_vs_one": diff,
                              # float sums in another order, amplified by Adam: close,
                              # not equal (the CPU: 9e-4 of the loss at most, PyTorch)
                              "max_history_rel_diff": max(
                                  float(np.max(np.abs(np.subtract(two["history"][k], v))
                                               / np.maximum(np.abs(v), 1e-12)))
                                  for k, v in one0["history"].items()),
                              "history_close": all(np.allclose(two["history"][k], v, rtol=2e-3)
                                                   for k, v in one0["history"].items())}
    else:
        r["two_processes"] = None
    stopped = killed.exists() and "stopped by SIGTERM" in killed.read_text()
    r["resume"] = resumed(stopped, res, res_w, one, one_w)
    if b == "torch":
        res0_w, res0 = load(b, "resumed0")
        killed0 = out / f"{b}-3c-sigterm-nodropout.log"
        r["resume_nodropout"] = resumed(
            killed0.exists() and "stopped by SIGTERM" in killed0.read_text(),
            res0, res0_w, one0, one0_w)
    bench = out / f"bench_{b}.json"
    if bench.exists():
        d = json.loads(bench.read_text())
        r["bench"] = {"A/B": d["fit"]["A/B"], "A/C": d["fit"]["A/C"], "C/B": d["fit"]["C/B"],
                      "A_s": d["fit"]["A_median_s"], "B_s": d["fit"]["B_median_s"],
                      "C_s": d["fit"]["C_median_s"],
                      "checkpoint_ratio_direct": d["checkpoint"]["ratio_direct"],
                      "det_checkpoint_ms": 1e3 * d["checkpoint"]["det"]["direct_s"],
                      "keras_backup_ms": 1e3 * d["checkpoint"]["keras"]["direct_s"]}
    summary["backends"][b] = r
    print(f"## {b}\n")
    print(f"- steps: " + ", ".join(f"{k} rc {v['rc']} ({v['seconds']}s)"
                                   for k, v in steps.items() if k.startswith(b + "-")))
    print(f"- one process on the GPU: {r['on_gpu']} ({one and one['devices']}), "
          f"{one and one['steps_per_s']} steps/s")
    print(f"- two processes on one GPU: {r['two_processes']}")
    print(f"- SIGTERM + resume: {r['resume']}")
    if "resume_nodropout" in r:
        print(f"- SIGTERM + resume without dropout: {r['resume_nodropout']}")
    print(f"- bench: {r.get('bench')}\n")
(out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
PY
echo "done in ${SECONDS}s; $OUT"
