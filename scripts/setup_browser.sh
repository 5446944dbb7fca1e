#!/usr/bin/env bash
# Headless Chromium for the web UI's page tests (tests/e2e/test_ui.py) and scripts/bench/bench_ui.py.
# Debian's package: no browser can be downloaded from elsewhere here, so Playwright
# drives this system build (executable_path) instead of its own. Idempotent: does
# nothing when a chromium is already on PATH.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  echo "setup_browser: $(chromium --version 2>/dev/null || echo chromium) already installed"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "setup_browser: chromium is missing; run as root (apt-get install -y chromium)," \
       "or the UI's page tests are skipped" >&2
  exit 0
fi
echo "setup_browser: installing Debian's chromium (headless page tests)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium >/dev/null
echo "setup_browser: $(chromium --version 2>/dev/null || echo chromium installed)"
