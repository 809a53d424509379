#!/usr/bin/env bash
# The GPU acceptance in one command, on a machine with a CUDA GPU:
#   bash scripts/gpu_acceptance.sh [all|tests|speedrun|bench|profile] [--cpu]   (in any order)
# Installs the wheels of .whl/ (scripts/gpu_prepare.sh) when Hydra or pydantic is missing, reads the data
# from .gpu-data/ unless MULTIGPU_DATA says otherwise, and writes gpu.md (and the logs) to $OUT,
# or outputs/gpu when OUT is unset.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! python3 -c "import hydra, omegaconf, pydantic" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/multigpu-site .whl/*.whl
  export PYTHONPATH="/tmp/multigpu-site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export MULTIGPU_DATA="${MULTIGPU_DATA:-$PWD/.gpu-data}"
# The part and the options are passed as given, in any order (--out given here wins over $OUT).
exec python3 -m multigpu.tools.acceptance --out "${OUT:-outputs/gpu}" "$@"
