#!/usr/bin/env bash
# The static checks `make test` (and so CI) runs before the suite: ruff's lint, ruff's format
# check and mypy over the whole tree (pyproject.toml configures all three). Any finding fails.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV_BIN=.venv/bin
"$VENV_BIN/ruff" check .
"$VENV_BIN/ruff" format --check .
"$VENV_BIN/python" -m mypy
