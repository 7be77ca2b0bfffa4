#!/usr/bin/env bash
# gpu-check.sh: the one GPU check of pipetrain, for a machine with at least one
# NVIDIA GPU (sized for one H200; safe there: it changes no device setting).
#   1. configures and builds the CUDA targets (-DPIPETRAIN_CUDA=ON,
#      CMAKE_CUDA_ARCHITECTURES=90 unless CUDA_ARCH says otherwise),
#   2. runs the GPU tests (CTest label "gpu") and the loss-scaler test,
#   3. runs the GPU benchmarks: MFU of one GPT stage's training step in bf16 at
#      d_model 2048 with GEMM efficiency against plain cuBLAS, and the
#      bandwidth of the staged-MPI and NCCL transports between 2 ranks (NCCL
#      only when the ranks have different GPUs; on one GPU mpi_staged is the
#      fallback and NCCL is reported n/a),
# all within BUDGET_S seconds (default 480), and prints a summary table LAST.
#   scripts/gpu-check.sh            (from anywhere; build dir: build-gpu)
#   BUILD=/tmp/b CUDA_ARCH=90 BUDGET_S=480 scripts/gpu-check.sh
# Exit status: 0 when everything ran and passed, 1 otherwise.
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${BUILD:-$ROOT/build-gpu}"
CUDA_ARCH="${CUDA_ARCH:-90}"
BUDGET_S="${BUDGET_S:-480}"
JOBS="${JOBS:-$(nproc)}"
LOGS="$BUILD/gpu-check-logs"
START=$(date +%s)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 GTEST_COLOR=no
MPIRUN=(mpirun --oversubscribe --bind-to none)

declare -A RESULT  # summary cells
STATUS=0

# run_step NAME CAP_SECONDS CMD...: runs CMD with a timeout of min(CAP, time
# left in the budget minus 10 s for the summary); output in $LOGS/NAME.log.
run_step() {
  local name=$1 cap=$2
  shift 2
  local left=$((BUDGET_S - ($(date +%s) - START) - 10))
  local limit=$((cap < left ? cap : left))
  if [ "$limit" -le 5 ]; then
    RESULT[$name]="skipped (budget)"
    STATUS=1
    return 1
  fi
  echo "== $name (limit ${limit}s): $*"
  timeout --kill-after=10 "$limit" "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$LOGS/$name.log"
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    RESULT[$name]="TIMEOUT after ${limit}s"
    STATUS=1
  elif [ $rc -ne 0 ]; then
    RESULT[$name]="FAILED (rc $rc, $LOGS/$name.log)"
    STATUS=1
  else
    RESULT[$name]="ok"
  fi
  return $rc
}

# value KEY: a "RESULT KEY VALUE" line of the bench logs, or "-".
value() {
  local v
  v=$(grep -h "^RESULT $1 " "$LOGS"/bench_*.log 2>/dev/null | tail -n 1 | awk '{print $3}')
  echo "${v:--}"
}

mkdir -p "$LOGS"
rm -f "$LOGS"/*.log
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total,driver_version --format=csv,noheader
fi

# ---- 1. configure and build the CUDA targets only (the CLI is not needed) ----
TARGETS=(test_cuda_select test_cuda_kernels test_cuda_gpt test_cuda_transport test_cuda_pipeline test_loss_scaler
         bench_cuda)
run_step configure 120 cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
  -DPIPETRAIN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" &&
  run_step build 300 cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}"
BUILT=$([ "${RESULT[build]:-}" = ok ] && echo 1 || echo 0)

# ---- 2. tests ----
if [ "$BUILT" = 1 ]; then
  run_step tests 150 bash -c "cd '$BUILD' && ctest -V -L gpu --timeout 120 && \
    ctest -V -R test_loss_scaler --timeout 60"
  TLOG="$LOGS/tests.log"
  PASSED=$(grep -Ec "^[0-9]+: \[       OK \] .*\([0-9]+ ms\)" "$TLOG")
  SKIPPED=$(grep -Ec "^[0-9]+: \[  SKIPPED \] .*\([0-9]+ ms\)" "$TLOG")
  FAILED=$(grep -Ec "^[0-9]+: \[  FAILED  \] .*\([0-9]+ ms\)" "$TLOG")
  RESULT[test_counts]="$PASSED passed, $SKIPPED skipped, $FAILED failed"
  [ "$SKIPPED" -gt 0 ] && RESULT[test_counts]+=" (skips: no GPU, or one GPU for NCCL)"
fi

# ---- 3. benchmarks ----
if [ "$BUILT" = 1 ]; then
  run_step bench_stage 120 "$BUILD/bench_cuda" stage --dims 2048 --seq 1024 --mb 8 \
    --blocks 2 --reps 5 --precision bf16
  run_step bench_transport 90 "${MPIRUN[@]}" -np 2 "$BUILD/bench_cuda" transport \
    --mbytes 64 --reps 10
fi

# ---- summary (last) ----
NCCL_CELL=$(value nccl_gbps_64MiB)
[ "$NCCL_CELL" = - ] && NCCL_CELL=$(value nccl_gbps)
ELAPSED=$(($(date +%s) - START))
cat <<EOF

================ pipetrain GPU check summary (${ELAPSED}s of ${BUDGET_S}s) ================
| check | result |
|---|---|
| configure + build (sm_${CUDA_ARCH}) | ${RESULT[configure]:-not run} / ${RESULT[build]:-not run} |
| GPU tests + loss scaler | ${RESULT[tests]:-not run}: ${RESULT[test_counts]:-} |
| GPT stage step, bf16, d_model 2048, T 1024, mb 8 (ms) | $(value stage_step_ms_d2048) |
| stage MFU (%, of 989.4 TFLOP/s dense bf16) | $(value stage_mfu_pct_d2048) |
| same GEMMs on plain cuBLAS: MFU (%) / share of step (%) | $(value gemm_alone_mfu_pct_d2048) / $(value gemm_share_pct_d2048) |
| backend matmul() incl. casts vs plain cuBLAS (%) | $(value matmul_vs_cublas_pct_d2048) |
| mpi_staged 2 ranks, 64 MiB (GB/s) | $(value mpi_staged_gbps_64MiB) |
| nccl 2 ranks, 64 MiB (GB/s) | ${NCCL_CELL} |
| benchmarks | stage: ${RESULT[bench_stage]:-not run}; transport: ${RESULT[bench_transport]:-not run} |
EOF
exit $STATUS
