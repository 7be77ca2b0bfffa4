#!/usr/bin/env bash
# test_blas.sh: a run names its BLAS kernels, never runs a fallback kernel
# silently, and replaces one that OpenBLAS chose by mistake (docs/performance.md).
#   tests/cli/test_blas.sh BUILD_DIR
# OpenBLAS fell back to its Prescott (SSE3) kernels on CPUs it did not know;
# here the fallback is forced through OPENBLAS_CORETYPE, marked as not the
# user's (PIPETRAIN_TEST_BLAS_FORCED), so pipetrain must restart itself on
# the CPU's best kernels. A user's own OPENBLAS_CORETYPE is kept, with a warning.
source "$(dirname "$0")/lib.sh" "$1"
py=tools/.venv/bin/python
deck=inputs/mlp_small.toml
kernels() { grep -o 'kernels [A-Za-z]*' "$tmp/out" | sort -u; }

run 2 train $deck --set output.dir=\"$tmp/plain\"
check "run succeeds" status_is 0
check "the header names the BLAS kernels of every rank" output_has "BLAS (ranks 0-1): OpenBLAS"
if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
  # Some machines set it in the environment (older OpenBLAS builds crash on
  # their CPUs); it is the user's choice then, kept and named.
  check "the environment's OPENBLAS_CORETYPE is kept and named" output_has "OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE"
else
  check "this machine runs a non-fallback kernel" bash -c "! grep -q FALLBACK '$tmp/out'"
fi
check "metrics.h5 records the kernels" \
  "$py" -c "import h5py,sys; a=h5py.File('$tmp/plain/metrics.h5').attrs; sys.exit(0 if a['blas_core'] and a['blas_best_core'] and a['cpu'] else 1)"

OPENBLAS_CORETYPE=Prescott PIPETRAIN_TEST_BLAS_FORCED=1 run 2 train $deck --set output.dir=\"$tmp/forced\"
check "a fallback kernel is replaced: run succeeds" status_is 0
check "... saying what it did and how to override" output_has "pipetrain set OPENBLAS_CORETYPE="
check "... and the ranks then run the best kernels" bash -c "! grep -q FALLBACK '$tmp/out'"
check "... not Prescott" bash -c "! grep -q 'kernels Prescott' '$tmp/out'"

OPENBLAS_CORETYPE=Prescott run 2 train $deck --set output.dir=\"$tmp/user\"
check "the user's OPENBLAS_CORETYPE is kept" output_has "kernels Prescott"
check "... with a warning naming it" output_has "because OPENBLAS_CORETYPE=Prescott is set"
check "... and the run header marks the fallback" output_has "FALLBACK"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
