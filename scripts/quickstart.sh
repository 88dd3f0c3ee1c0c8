#!/usr/bin/env bash
# Set up a virtualenv (CPU torch) and run the whole pipeline on the embedded corpus at tiny size:
# data -> supernet (SPOS) -> evolutionary search -> runs/quickstart/search/best_arch.json + search_curve.png.
# Usage: bash scripts/quickstart.sh [extra `lvbert run` options, e.g. --overwrite or --resume]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
# torch is pinned to the CPU wheel; on a GPU machine install your CUDA torch into .venv first (see README).
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/pip install -q torch==2.13.0
.venv/bin/pip install -q -e .
exec .venv/bin/lvbert run --size tiny --out runs/quickstart "$@"
