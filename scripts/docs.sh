#!/usr/bin/env bash
# Build the docs site (docs/ + README.md + API reference from the docstrings) into site/.
#
#   bash scripts/docs.sh           # build, strict: a broken link or reference fails
#   bash scripts/docs.sh serve     # preview at http://127.0.0.1:8000
#
# The site's tools live in their own venv (.venv-docs): they never touch the training
# environments. mkdocstrings reads the docstrings without importing det_sdk.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-docs
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
if [ ! -x "$VENV/bin/mkdocs" ]; then
  "$PYTHON" -m venv "$VENV"
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/python" -m pip install -q \
    mkdocs==1.6.1 mkdocs-material==9.8.2 mkdocstrings==1.0.8 mkdocstrings-python==2.0.11 \
    2> >(grep -v "^WARNING: Location" >&2)
fi
# The site's pages: docs/ as it is, and the README as the home page (its links into
# docs/ made relative to the site).
SRC=build/docs-src
rm -rf "$SRC" && mkdir -p "$SRC" && cp -r docs/. "$SRC"/
sed -e 's#](docs/#](#g' README.md > "$SRC/index.md"
if [ "${1:-build}" = serve ]; then
  exec "$VENV/bin/mkdocs" serve
fi
if ! out=$(NO_MKDOCS_2_WARNING=1 "$VENV/bin/mkdocs" build --strict 2>&1); then
  echo "$out" | grep -v "^INFO" >&2
  echo "[docs] the site does not build: fix the warnings above" >&2
  exit 1
fi
echo "[docs] built site/ ($(find site -name '*.html' | wc -l) pages)"
