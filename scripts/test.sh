#!/usr/bin/env bash
# Set up a virtualenv (CPU torch) and run the whole test suite. Usage: bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
# torch is pinned to the CPU wheel; on a GPU machine install your CUDA torch into .venv first (see README).
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/pip install -q torch==2.13.0
.venv/bin/pip install -q -e '.[dev]'
# Two pytest-xdist workers, one thread each (tests/conftest.py), a test file per worker at a time (its module-scoped
# fixtures are built once): most tests run one thread, so two workers halve the wall time on CI's two cores.
# LVBERT_TEST_WORKERS=0 runs the suite in one process.
exec .venv/bin/python -m pytest -q -n "${LVBERT_TEST_WORKERS:-2}" --dist loadfile "$@"
