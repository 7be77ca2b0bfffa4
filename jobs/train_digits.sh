#!/usr/bin/env bash
# train_digits.sh: a real image data set end to end (issue #46): the UCI
# handwritten digits that scikit-learn ships (1797 images of 1 x 8 x 8, 10
# classes) converted to pipetrain's HDF5 image files (tools/images_to_h5.py,
# docs/data.md "Image files"), then trained on 2 ranks by the cnn family
# (inputs/cnn_digits.toml) and by an MLP on the flattened pixels
# (inputs/mlp_digits.toml); the
# held-out losses go to results/train_digits.md, against ln 10 = 2.303 for a
# guess. Losses are deterministic (same deck, seed, layout, threads), so the
# table does not depend on the machine's load; the CPU and kernels are named.
#   jobs/train_digits.sh            (needs build/ and tools/.venv: make build tools)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
PY=tools/.venv/bin/python
$PY -c "import sklearn" 2>/dev/null || tools/.venv/bin/pip install -q -r tools/requirements-images.txt
$PY tools/images_to_h5.py digits data/digits
root=runs/train_digits
rm -rf "$root"; mkdir -p "$root" results
train() {  # NAME DECK ARGS...
  local name=$1 deck=$2; shift 2
  mpirun --oversubscribe --bind-to none -np 2 build/pipetrain train "$deck" "$@" \
    --set output.dir=\"$root/$name\" < /dev/null > "$root/$name.log" 2>&1 ||
    { echo "train_digits: $name failed:"; tail -5 "$root/$name.log"; exit 1; }
}
train cnn inputs/cnn_digits.toml
train mlp inputs/mlp_digits.toml
$PY - "$root" > results/train_digits.md <<'PYEOF'
import sys, h5py, numpy as np
root = sys.argv[1]
def attr(f, k):
    v = f.attrs.get(k, "")
    return v.decode() if isinstance(v, bytes) else str(v)
print("# Real images: the handwritten digits through HDF5 image files (jobs/train_digits.sh)\n")
with h5py.File(root + "/cnn/metrics.h5") as f:
    print("CPU %s; BLAS %s (core %s); GEMMs %s. 2 ranks, 1F1B, 4 micro-batches of 16, 200 steps "
          "(inputs/cnn_digits.toml, inputs/mlp_digits.toml); 1498 training and 299 held-out images "
          "(tools/images_to_h5.py digits, seed 0).\n" % (attr(f, "cpu"), attr(f, "blas"), attr(f, "blas_core"), attr(f, "gemm")))
print("| model | held-out loss at steps 50 / 100 / 150 / 200 | final training loss |")
print("|---|---|---|")
for name, what in (("cnn", "cnn: stem + 2 stages of 2 residual blocks (16, 32 channels), group norm"),
                   ("mlp", "mlp: 64 -> 128 -> 128 -> 128 -> 10, GELU")):
    with h5py.File("%s/%s/metrics.h5" % (root, name)) as f:
        ev = f["eval_loss"][:]
        ev = ev[~np.isnan(ev)]
        loss = f["loss"][:]
    print("| %s | %s | %.4f |" % (what, " / ".join("%.4f" % v for v in ev), loss[-1]))
print("\nA guess scores ln 10 = 2.303; the losses are bitwise reproducible with the same deck, seed, "
      "layout and thread count.")
PYEOF
cat results/train_digits.md
