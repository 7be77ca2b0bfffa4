#!/usr/bin/env bash
# bench_gemm.sh: the CPU GEMM choices of training.cpu_gemm (auto, the
# default: onednn's calls but OpenBLAS for wide weight gradients over <= 64
# rows; onednn: oneDNN's matmul primitive for A x B^T and dnnl_sgemm
# otherwise; onednn-sgemm; openblas) on the GEMMs the benchmark decks issue per micro-batch, one
# thread: all calls, then each kind of call (A x B^T, A x B, A^T x B) alone on
# the model's own buffers. Runs build/bench_gemm per workload and writes
# results/bench_gemm.md with the machine, BLAS and GEMM library named.
#   jobs/bench_gemm.sh                  REPS=21 OUT=results/bench_gemm.md
#   PERSONALITY=avx2 jobs/bench_gemm.sh  oneDNN at most AVX2, OpenBLAS Haswell
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# PERSONALITY=avx2 measures an AVX2-only CPU on any x86 machine: oneDNN's
# kernels capped at AVX2 (ONEDNN_MAX_CPU_ISA) and OpenBLAS's Haswell kernels;
# the report goes to results/bench_gemm_avx2.md. Default: the CPU's own.
PERSONALITY=${PERSONALITY:-native}
case $PERSONALITY in
  native) unset OPENBLAS_CORETYPE ONEDNN_MAX_CPU_ISA; suffix="" ;;  # pipetrain picks the best kernels itself
  avx2) export ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell; suffix=_avx2 ;;
  *) echo "bench_gemm: PERSONALITY must be native or avx2, not '$PERSONALITY'" >&2; exit 1 ;;
esac
REPS=${REPS:-21}
OUT=${OUT:-results/bench_gemm$suffix.md}
PY=tools/.venv/bin/python
die() { echo "bench_gemm: $*" >&2; exit 1; }
[ -x build/pipetrain ] && [ -x build/bench_gemm ] || die "run 'make build' first"
[ -x "$PY" ] || die "run 'make tools' first"
case $REPS in ''|*[!0-9]*|0) die "REPS must be a positive integer, not '$REPS'" ;; esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The identity line (machine, BLAS and its kernels, GEMM library) of a
# one-step run of the MLP deck on this machine.
mpirun --oversubscribe --bind-to none -np 1 build/pipetrain train inputs/bench_mlp.toml \
  --set training.steps=1 --set pipeline.predict=false --set output.dir=\"$work/id\" > "$work/id.log" 2>&1 ||
  die "identity run failed (log: $work/id.log)"
identity=$($PY tools/run_identity.py "$work/id/metrics.h5")

{
  echo "# CPU GEMM choices on the benchmark decks' GEMMs (#12)"
  echo
  echo "Command: \`PERSONALITY=$PERSONALITY jobs/bench_gemm.sh\` (\`build/bench_gemm\`, median of $REPS repetitions, one thread). $identity $(date +%F)."
  echo
  echo "Each table: the GEMMs one micro-batch's forward + backward issues, replayed warm (one set of"
  echo "buffers) and on the model's own buffers, then the model's forward + backward itself; the"
  echo "limits follow (P stages at most P x the rate x N/(N+P-1)). The second table splits the"
  echo "model-buffer replay by kind of call: a Linear layer's forward is x W^T, its input gradient"
  echo "dY W, its weight gradient dY^T x."
  for spec in "inputs/bench_mlp.toml training.batch_size=512" "inputs/bench_mlp.toml training.batch_size=256" \
              "inputs/gpt_markov.toml training.batch_size=32"; do
    read -r deck set <<< "$spec"
    echo
    echo "## $deck, $set"
    echo
    build/bench_gemm "$deck" --set "$set" --stages 2 --reps "$REPS" || die "build/bench_gemm failed on $deck"
  done
} > "$work/out.md"
mv "$work/out.md" "$OUT"
cat "$OUT"
