#!/usr/bin/env bash
# Set up a virtualenv (CPU torch) and run the whole test suite. Usage: bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
# torch is pinned to the CPU wheel; on a GPU machine install your CUDA torch into .venv first (see README).
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/pip install -q torch==2.13.0
.venv/bin/pip install -q -e '.[dev]'
exec .venv/bin/python -m pytest -q "$@"
