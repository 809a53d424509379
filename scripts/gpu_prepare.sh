#!/usr/bin/env bash
# Prepare, where pip reaches PyPI, what the GPU acceptance needs on a machine that has Python
# 3.12 with torch and Lightning but no Hydra, no pydantic and no internet: the wheels of
# hydra-core, omegaconf, antlr4 and pydantic with its own dependencies (the versions installed
# here) in .whl/, and the Fashion-MNIST files of
# $MULTIGPU_DATA in .gpu-data/. Both folders are git-ignored; take them along with the checkout
# (about 31 MB) and run scripts/gpu_acceptance.sh there.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c "import hydra, omegaconf, pydantic" 2>/dev/null || {
  echo "error: Hydra is not installed here: activate the project's environment (. .venv/bin/activate)" >&2
  exit 2
}
version() { python3 -c "import importlib.metadata as m; print(m.version('$1'))"; }
rm -rf .whl && mkdir .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux2014_x86_64 -d .whl \
  "hydra-core==$(version hydra-core)" "omegaconf==$(version omegaconf)" \
  "pydantic==$(version pydantic)" "pydantic-core==$(version pydantic-core)" \
  "annotated-types==$(version annotated-types)" "typing-inspection==$(version typing-inspection)" \
  "typing-extensions==$(version typing-extensions)"
# antlr4's runtime 4.9.3 (what Hydra 1.3 needs) is published as a source archive only.
python3 -m pip wheel -q --no-deps -w .whl "antlr4-python3-runtime==$(version antlr4-python3-runtime)"
source="${MULTIGPU_DATA:?set MULTIGPU_DATA to a folder holding FashionMNIST/raw/*.gz}"
rm -rf .gpu-data && mkdir -p .gpu-data/FashionMNIST/raw
cp "$source"/FashionMNIST/raw/*.gz .gpu-data/FashionMNIST/raw/
ls -l .whl .gpu-data/FashionMNIST/raw
