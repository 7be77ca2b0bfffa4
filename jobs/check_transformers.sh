#!/usr/bin/env bash
# check_transformers.sh: the Hugging Face GPT-2 export checked with PyTorch
# and transformers (#43, part 3; docs/interop.md). CI checks the same files
# and numbers without PyTorch (tests/tools/test_hf_gpt2.py); this is the
# check against the real library, where it can be installed.
#   jobs/check_transformers.sh [BUILD_DIR]      (default build)
# Makes (once) a venv with PyTorch (CPU use), transformers, h5py and
# tokenizers from PyPI (VENV=..., default BUILD_DIR/venv-transformers; a few
# GB, since PyPI's torch wheel brings its CUDA libraries), builds pipetrain
# and pipetrain_logits, and runs jobs/check_transformers.py, which writes
# results/check_transformers.md. Exits non-zero when a check fails.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
venv=${VENV:-$build/venv-transformers}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q torch==2.15.0 transformers==5.25.0 h5py tokenizers
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$build" -j2 --target pipetrain pipetrain_logits
OMP_NUM_THREADS=1 "$venv/bin/python" jobs/check_transformers.py "$build" results/check_transformers.md
