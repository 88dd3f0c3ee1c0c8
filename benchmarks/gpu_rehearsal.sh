#!/usr/bin/env bash
# Rehearse a GPU loan on a CPU machine, before spending device time (issue #14):
#   bash benchmarks/gpu_rehearsal.sh OUT [smoke] [search] [bench]        (from the repository root)
# builds (once) a Python 3.12 venv with the H200 image's versions of what it has (torch 2.11.0, Lightning 2.6.6,
# transformers 5.17.0, tokenizers 0.23.2, safetensors 0.8.0, huggingface_hub 1.33.0, numpy 2.5.2; filelock and the
# rest at their newest, as an image may have them) and neither nni nor datasets, packs the wheels that travel
# (../shared/gpu/pack-wheels.sh -> .gpu-wheels/), and runs gpu_session.sh with ACCEL=cpu in it: the carried wheels are
# installed with --no-deps exactly as on the GPU machine, so a version clash shows here. It found the silent
# supernet start of the first H200 check: NNI's experiment lock with filelock 4.3.1 (nni_compat.PidFileLock).
# Needs PyPI: torch 2.11 for cp312 is a CUDA build, about 5 GB in the venv. VENV (default /tmp/lvbert-gpu-venv),
# PY (default: python3.12, or pyenv's newest 3.12 when the python3.12 on PATH is only a pyenv shim).
set -euo pipefail
OUT=${1:?usage: gpu_rehearsal.sh OUT [smoke] [search] [bench]}
shift
VENV=${VENV:-/tmp/lvbert-gpu-venv}
if [ ! -f "$VENV/.lvbert-rehearsal" ]; then  # built and installed completely
  PY=${PY:-python3.12}
  if ! $PY --version >/dev/null 2>&1 && command -v pyenv >/dev/null; then
    PY="env PYENV_VERSION=$(pyenv versions --bare | grep -E '^3\.12(\.|$)' | sort -V | tail -1) python3.12"
  fi
  $PY -m venv --clear "$VENV"
  "$VENV/bin/pip" install -q torch==2.11.0 lightning==2.6.6 pytorch-lightning==2.6.6 transformers==5.17.0 \
    tokenizers==0.23.2 safetensors==0.8.0 huggingface_hub==1.33.0 numpy==2.5.2 torchmetrics==1.9.0 pyarrow pandas \
    scikit-learn scipy matplotlib tqdm rich pyyaml psutil colorama cloudpickle xxhash tensorboard requests httpx \
    filelock "setuptools<81"
  touch "$VENV/.lvbert-rehearsal"
fi
"$VENV/bin/python3" -c "import nni" 2>/dev/null && { echo "$VENV has nni: not like the GPU machine" >&2; exit 2; }
here=$(cd "$(dirname "$0")/.." && pwd)
(cd "$here" && bash ../shared/gpu/pack-wheels.sh > /dev/null)
rm -rf /tmp/site  # where gpu_session.sh installs the carried wheels
cd "$here"
PATH="$VENV/bin:$PATH" ACCEL=cpu bash benchmarks/gpu_session.sh "$OUT" "$@"
