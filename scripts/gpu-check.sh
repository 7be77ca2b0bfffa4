#!/usr/bin/env bash
# gpu-check.sh: the one GPU check of pipetrain, for a machine with at least one
# NVIDIA GPU (sized for one H200; safe there: it changes no device setting).
#   0. prints what the machine has: nvidia-smi, nvcc --version, and a tiny
#      query of the CUDA runtime and driver versions (scripts/cuda_versions.cpp);
#      a driver too old for the runtime fails here, at the top,
#   1. configures and builds the CUDA targets (-DPIPETRAIN_CUDA=ON,
#      CMAKE_CUDA_ARCHITECTURES=90 unless CUDA_ARCH says otherwise),
#   2. runs each GPU test (CTest label "gpu") and the loss-scaler test, with
#      PIPETRAIN_REQUIRE_GPU=1 when nvidia-smi lists a GPU, so that a test that
#      finds no device fails instead of skipping,
#   3. runs the GPU benchmarks: MFU of one GPT stage's training step in bf16 at
#      d_model 2048 with GEMM efficiency against plain cuBLAS, and the
#      bandwidth of the staged-MPI and NCCL transports between 2 ranks (NCCL
#      only when the ranks have different GPUs; on one GPU mpi_staged is the
#      fallback and NCCL is reported n/a),
# all within BUDGET_S seconds (default 480), and prints one summary table LAST:
# one row per test, "ok" only when every case ran and passed; skipped cases
# make a row SKIPPED with the reason, never "ok".
#   scripts/gpu-check.sh            (from anywhere; build dir: build-gpu)
#   BUILD=/tmp/b CUDA_ARCH=90 BUDGET_S=480 scripts/gpu-check.sh
# Without a GPU (no nvidia-smi, or it lists none) it says so and fails at
# once; PIPETRAIN_GPU_CHECK_WITHOUT_GPU=1 runs the rest anyway (to check the
# script itself: every GPU row then reads SKIPPED or FAILED).
# Exit status: 0 when every step ran and no test failed, 1 otherwise.
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${BUILD:-$ROOT/build-gpu}"
CUDA_ARCH="${CUDA_ARCH:-90}"
BUDGET_S="${BUDGET_S:-480}"
JOBS="${JOBS:-$(nproc)}"
LOGS="$BUILD/gpu-check-logs"
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
START=$(date +%s)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 GTEST_COLOR=no
MPIRUN=(mpirun --oversubscribe --bind-to none)

declare -A RESULT  # summary cells of the steps
TEST_ROWS=()       # "| test | result |" rows, in run order
STATUS=0

# left CAP: seconds a step may take: min(CAP, time left minus 15 s for the summary).
left() {
  local rest=$((BUDGET_S - ($(date +%s) - START) - 15))
  echo $(($1 < rest ? $1 : rest))
}

# run_step NAME CAP_SECONDS CMD...: runs CMD with a timeout of left(CAP);
# output in $LOGS/NAME.log; RESULT[NAME] = ok | FAILED (...) | TIMEOUT ...
run_step() {
  local name=$1 limit
  limit=$(left "$2")
  shift 2
  if [ "$limit" -le 5 ]; then
    RESULT[$name]="NOT RUN (budget spent)"
    STATUS=1
    return 1
  fi
  echo "== $name (limit ${limit}s): $*"
  timeout --kill-after=10 "$limit" "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$LOGS/$name.log"
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    RESULT[$name]="TIMEOUT after ${limit}s"
  elif [ $rc -ne 0 ]; then
    RESULT[$name]="FAILED (rc $rc, $LOGS/$name.log)"
  else
    RESULT[$name]="ok"
  fi
  [ $rc -eq 0 ] || STATUS=1
  return $rc
}

# value KEY: a "RESULT KEY VALUE" line of the logs, or "-".
value() {
  local v
  v=$(grep -h "^RESULT $1 " "$LOGS"/*.log 2>/dev/null | tail -n 1 | awk '{print $3}')
  echo "${v:--}"
}

# ---- 0. what the machine has ----
versions() {
  GPU_SEEN=0
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi || true
    nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total,driver_version \
      --format=csv,noheader || true
    [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')" -gt 0 ] && GPU_SEEN=1
    [ "$GPU_SEEN" = 1 ] || RESULT[gpu]="FAILED: nvidia-smi lists no GPU"
  else
    echo "gpu-check: nvidia-smi not found: no NVIDIA driver here, so this is not a GPU check"
    RESULT[gpu]="FAILED: nvidia-smi not found (no NVIDIA driver)"
  fi
  "$NVCC" --version || echo "gpu-check: nvcc not found at $NVCC"
  if [ "$GPU_SEEN" = 1 ]; then
    RESULT[gpu]="ok: $(nvidia-smi -L | grep -c '^GPU ') GPU(s), driver $(nvidia-smi \
      --query-gpu=driver_version --format=csv,noheader | head -n 1)"
    export PIPETRAIN_REQUIRE_GPU=1  # from here on, a test without a device fails
  fi
  run_step query_build 60 "$NVCC" -o "$LOGS/cuda_versions" "$ROOT/scripts/cuda_versions.cpp" &&
    run_step versions 20 "$LOGS/cuda_versions"
}

# ---- 2. tests: one row each ----
# classify NAME RC LOG: the row's result from the test's exit status and its
# GoogleTest lines (under mpirun only rank 0 prints them).
classify() {
  local name=$1 rc=$2 log=$3 passed skipped failed why
  passed=$(grep -Ec '\[       OK \] .*\([0-9]+ ms\)' "$log")
  skipped=$(grep -Ec '\[  SKIPPED \] .*\([0-9]+ ms\)' "$log")
  failed=$(grep -Ec '\[  FAILED  \] .*\([0-9]+ ms\)' "$log")
  why=$(grep -A1 -m1 ': Skipped$' "$log" | tail -n 1 | sed -E 's/^[0-9]+: //' | cut -c1-90)
  local total=$((passed + skipped + failed)) row
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] || grep -q '\*\*\*Timeout' "$log"; then
    row="TIMEOUT ($passed of $total passed before it)"
  elif [ "$rc" -ne 0 ] || [ "$failed" -gt 0 ]; then
    row="FAILED: $failed of $total failed ($log)"
  elif [ "$total" -eq 0 ]; then
    row="FAILED: no test case ran ($log)"
  elif [ "$skipped" -gt 0 ]; then
    row="SKIPPED $skipped of $total: ${why:-see log}; $passed passed"
  else
    row="ok ($passed passed)"
  fi
  case $row in ok*|SKIPPED*) ;; *) STATUS=1 ;; esac
  [ "$skipped" -gt 0 ] && SKIPPED_CASES=$((SKIPPED_CASES + skipped))
  TEST_ROWS+=("| $name | $row |")
}

# Every test gets up to 120 s, all of them together TESTS_S (default 210 s),
# so that the benchmarks keep their share of the budget.
run_tests() {
  local names name limit rc phase_end
  phase_end=$(($(date +%s) + ${TESTS_S:-210}))
  names=$(cd "$BUILD" && ctest -N -L gpu | sed -nE 's/^ *Test +#[0-9]+: +([^ ]+).*/\1/p')
  names="$names test_loss_scaler_np1 test_loss_scaler_np2"
  for name in $names; do
    limit=$(left 120)
    limit=$((limit < phase_end - $(date +%s) ? limit : phase_end - $(date +%s)))
    if [ "$limit" -le 5 ]; then
      TEST_ROWS+=("| $name | NOT RUN (budget spent) |")
      STATUS=1
      continue
    fi
    echo "== $name (limit ${limit}s)"
    (cd "$BUILD" && timeout --kill-after=10 "$limit" ctest -V -R "^${name}\$" \
      --timeout "$limit") >"$LOGS/$name.log" 2>&1
    rc=$?
    grep -E '\[ +(OK|SKIPPED|FAILED) +\]|Failure|rel error' "$LOGS/$name.log" | tail -n 15
    classify "$name" "$rc" "$LOGS/$name.log"
  done
}

mkdir -p "$LOGS"
rm -f "$LOGS"/*.log
SKIPPED_CASES=0
versions
if [ "${GPU_SEEN:-0}" = 0 ] && [ "${PIPETRAIN_GPU_CHECK_WITHOUT_GPU:-0}" != 1 ]; then
  STATUS=1
  GO=0
else
  GO=1
fi

# ---- 1. configure and build the CUDA targets only (the CLI is not needed) ----
TARGETS=(test_cuda_select test_cuda_kernels test_cuda_limits test_cuda_gpt test_cuda_transport
         test_cuda_pipeline test_loss_scaler bench_cuda)
if [ "$GO" = 1 ]; then
  run_step configure 120 cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
    -DPIPETRAIN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" &&
    run_step build 300 cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}"
fi
BUILT=$([ "${RESULT[build]:-}" = ok ] && echo 1 || echo 0)

# ---- 2. tests, 3. benchmarks ----
if [ "$BUILT" = 1 ]; then
  run_tests
  run_step bench_stage 110 "$BUILD/bench_cuda" stage --dims 2048 --seq 1024 --mb 8 \
    --blocks 2 --reps 5 --precision bf16
  run_step bench_transport 80 "${MPIRUN[@]}" -np 2 "$BUILD/bench_cuda" transport \
    --mbytes 64 --reps 10
fi

# ---- summary (last) ----
NCCL_CELL=$(value nccl_gbps_64MiB)
[ "$NCCL_CELL" = - ] && NCCL_CELL=$(value nccl_gbps)
if [ "$STATUS" -ne 0 ]; then
  VERDICT="FAILED (see the rows above that do not read ok or SKIPPED)"
elif [ "$SKIPPED_CASES" -gt 0 ]; then
  VERDICT="passed, with $SKIPPED_CASES test case(s) SKIPPED (reasons above)"
else
  VERDICT="passed: every step ran, every test case passed"
fi
ELAPSED=$(($(date +%s) - START))
cat <<EOF

================ pipetrain GPU check summary (${ELAPSED}s of ${BUDGET_S}s) ================
| check | result |
|---|---|
| GPU seen by nvidia-smi | ${RESULT[gpu]:-not run} |
| CUDA runtime / driver supports / devices (tiny query) | $(value cuda_runtime) / $(value cuda_driver) / $(value cuda_devices): ${RESULT[versions]:-${RESULT[query_build]:-not run}} |
| configure + build (sm_${CUDA_ARCH}) | ${RESULT[configure]:-NOT RUN} / ${RESULT[build]:-NOT RUN} |
$(if [ ${#TEST_ROWS[@]} -gt 0 ]; then printf '%s\n' "${TEST_ROWS[@]}"; else echo "| GPU tests | NOT RUN |"; fi)
| GPT stage step, bf16, d_model 2048, T 1024, mb 8 (ms) | $(value stage_step_ms_d2048) |
| stage MFU (%, of 989.4 TFLOP/s dense bf16) | $(value stage_mfu_pct_d2048) |
| same GEMMs on plain cuBLAS: MFU (%) / share of step (%) | $(value gemm_alone_mfu_pct_d2048) / $(value gemm_share_pct_d2048) |
| backend matmul() incl. casts vs plain cuBLAS (%) | $(value matmul_vs_cublas_pct_d2048) |
| mpi_staged 2 ranks, 64 MiB (GB/s) | $(value mpi_staged_gbps_64MiB) |
| nccl 2 ranks, 64 MiB (GB/s) | ${NCCL_CELL} |
| benchmarks | stage: ${RESULT[bench_stage]:-NOT RUN}; transport: ${RESULT[bench_transport]:-NOT RUN} |
| verdict | ${VERDICT} |
EOF
exit $STATUS
