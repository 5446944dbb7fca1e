#!/usr/bin/env bash
# Run det_sdk's checks: set up what is missing (scripts/setup.sh, a no-op once
# done), then lint and the test suite. Extra arguments go to pytest.
#
#   bash scripts/test.sh                 # everything
#   bash scripts/test.sh -k resume -x    # a subset
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check det_sdk tests scripts examples
# The suite must not depend on a cluster or a resume left in the caller's shell.
unset DET_ALLOCATION_ID DET_RESUME DET_CONFIG DET_RUNS_DIR
export TF_CPP_MIN_LOG_LEVEL=2
exec .venv/bin/python -m pytest "$@"
