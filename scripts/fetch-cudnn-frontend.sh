#!/usr/bin/env bash
# fetch-cudnn-frontend.sh: puts the headers of NVIDIA's cuDNN frontend (the
# header-only C++ graph API that src/cuda/fused_attention.cpp builds cuDNN's
# SDPA with) in third_party/cudnn_frontend/include, unless the pinned
# version is already there. They come from the PyPI wheel
# nvidia-cudnn-frontend, whose include/ folder holds them; only that folder
# is kept. The folder is git-ignored; the CUDA build (make cuda) runs this.
#   scripts/fetch-cudnn-frontend.sh
#   CUDNN_FRONTEND_WHEEL=/path/to/nvidia_cudnn_frontend-1.32.0-...whl scripts/fetch-cudnn-frontend.sh
#     (a wheel already downloaded: no network)
# cuDNN itself (libcudnn.so.9, cudnn.h) is the CUDA toolkit's here and the
# nvidia-cudnn-cu13 wheel's on the GPU machine (docs/cuda.md).
set -euo pipefail

VERSION=1.32.0
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST="$ROOT/third_party/cudnn_frontend"
STAMP="$DEST/VERSION"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$VERSION" ] && [ -f "$DEST/include/cudnn_frontend.h" ]; then
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
wheel="${CUDNN_FRONTEND_WHEEL:-}"
if [ -z "$wheel" ]; then
  echo "fetch-cudnn-frontend: downloading nvidia-cudnn-frontend $VERSION from PyPI"
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "nvidia-cudnn-frontend==$VERSION"
  wheel=$(ls "$tmp"/nvidia_cudnn_frontend-"$VERSION"-*.whl)
fi
[ -f "$wheel" ] || { echo "fetch-cudnn-frontend: no wheel at '$wheel'" >&2; exit 1; }

# Only the wheel's include/ folder (the Python package beside it is not needed).
python3 - "$wheel" "$tmp/unpacked" <<'PY'
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    members = [m for m in z.namelist() if m.startswith("include/")]
    if not any(m.endswith("include/cudnn_frontend.h") for m in members):
        sys.exit("fetch-cudnn-frontend: %s has no include/cudnn_frontend.h" % wheel)
    z.extractall(out, members)
PY
rm -rf "$DEST"
mkdir -p "$DEST"
mv "$tmp/unpacked/include" "$DEST/include"
echo "$VERSION" >"$STAMP"
echo "fetch-cudnn-frontend: cuDNN frontend $VERSION headers in ${DEST#$ROOT/}/include"
