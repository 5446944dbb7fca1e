#!/usr/bin/env bash
# Run det_sdk's checks: set up what is missing (scripts/setup.sh, a no-op once
# done), then lint and the test suite on one Keras stack, or on both.
#
#   bash scripts/test.sh                      # default stack: TF 2.21 + Keras 3 (.venv)
#   bash scripts/test.sh --stack keras2       # TF 2.15 + Keras 2 (.venv-keras2)
#   bash scripts/test.sh --stack all          # both, one after the other, then the docs site (what CI runs)
#   bash scripts/test.sh tests/unit           # the unit tests (seconds); tests/integration, tests/e2e
#   bash scripts/test.sh -m "not slow"        # unit + integration: no process started
#   bash scripts/test.sh -k resume -x         # a subset; other arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."

STACK=keras3
ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --stack) STACK=${2:?--stack needs keras3, keras2 or all}; shift ;;
    --stack=*) STACK=${1#--stack=} ;;
    *) ARGS+=("$1") ;;
  esac
  shift
done

if [ "$STACK" = all ]; then
  status=0
  bash "$0" --stack keras3 ${ARGS[@]+"${ARGS[@]}"} || status=$?
  bash "$0" --stack keras2 ${ARGS[@]+"${ARGS[@]}"} || status=$?
  bash scripts/docs.sh || status=$?   # the docs site builds, no broken link
  exit $status
fi
case "$STACK" in
  keras3) VENV=.venv ;;
  keras2) VENV=.venv-keras2 ;;
  *) echo "test: --stack must be keras3, keras2 or all, not '$STACK'" >&2; exit 2 ;;
esac

bash scripts/setup.sh --stack "$STACK"
"$VENV/bin/ruff" check det_sdk tests scripts examples harness
PYTHONPATH="$PWD" "$VENV/bin/lint-imports"  # the layers of docs/design.md: pyproject.toml's contracts
# The suite must not depend on a cluster or a resume left in the caller's shell.
unset DET_ALLOCATION_ID DET_RESUME DET_CONFIG DET_RUNS_DIR DET_MASTER
export TF_CPP_MIN_LOG_LEVEL=2
# On keras2 the tests marked stack_neutral (the master, CLI, UI, Slurm...) are deselected:
# they ran on keras3 (tests/conftest.py).
export DET_TEST_STACK="$STACK"
# Processes the tests start (horovodrun, trials of the master) use this venv's tools.
export PATH="$PWD/$VENV/bin:$PATH"
echo "[test $STACK] $("$VENV/bin/python" -c 'import tensorflow as tf; print("tensorflow", tf.__version__)' 2>/dev/null)"
# tests/*/test_pytorch*.py run on the keras3 stack only (.venv has torch; on keras2 they
# skip through pytest.importorskip("torch")): PyTorch does not depend on the Keras stack.
"$VENV/bin/python" -m pytest ${ARGS[@]+"${ARGS[@]}"}
