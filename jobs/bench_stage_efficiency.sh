#!/usr/bin/env bash
# bench_stage_efficiency.sh: compute efficiency of one GPT stage on the CPU
# backend: the stage's forward+backward time against OpenBLAS sgemm alone on
# exactly the GEMM shapes the stage issued, one thread. Goal: GEMMs >= 80% of
# stage time for d_model >= 512. Writes results/bench_stage_efficiency.md.
#   jobs/bench_stage_efficiency.sh [extra bench_stage_efficiency options]
set -euo pipefail
cd "$(dirname "$0")/.."
out=results/bench_stage_efficiency.md
mkdir -p results
{
  echo "# CPU backend: GEMM share of one GPT stage's forward+backward"
  echo
  echo "Command: \`jobs/bench_stage_efficiency.sh\` (runs \`build/bench_stage_efficiency --reps 5 $*\`)."
  echo "Machine: $(hostname), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $(date -u +%F)."
  echo
  build/bench_stage_efficiency --reps 5 "$@"
  echo
  echo "GEMM share = time of sgemm alone on the recorded shapes / time of the whole"
  echo "stage; the remainder is LayerNorm, causal softmax, GELU, residual adds and"
  echo "bookkeeping. Goal: >= 80% for d_model >= 512."
} | tee "$out"
