#!/usr/bin/env bash
# gpu-check.sh: the one GPU check of pipetrain. It runs from the bundle that
# scripts/gpu-bundle.sh builds on a CPU machine (make gpu-bundle), on a GPU
# machine that has no MPI, HDF5, BLAS or test framework and no network:
#   tar -xJf pipetrain-gpu.tar.xz && pipetrain-gpu/gpu-check.sh
#   BUDGET_S=420 LOGS=$OUT/gpu-check pipetrain-gpu/gpu-check.sh
#   0. what the machine has: GPU, driver, glibc, and where the CUDA runtime,
#      cuBLAS, NCCL and cuDNN are (toolkit or Python wheels); every bundled
#      program must load (ldd) with the bundle's libraries and those,
#   1. the tiny CUDA version query (a driver too old fails here, at the top),
#   2. every GPU test (tests.tsv: CTest's "gpu" label and the loss scaler),
#      with PIPETRAIN_REQUIRE_GPU=1 when a GPU is seen, so that a test that
#      finds no device fails instead of skipping,
#   3. a 2-rank training run of the application on the GPU (CLI, deck, HDF5),
#   4. the benchmarks: one GPT stage's bf16 step (MFU, cuBLAS share), the
#      2-rank transport in both directions at once, and a 2-stage GPT
#      pipeline trained by the application's Trainer (MFU, bubble),
# within BUDGET_S seconds (default 420), and prints one summary table LAST:
# a row per step and test, "ok" only when everything in it ran and passed.
# At the end every log, the training run's outputs and the summary are packed
# into one file, $LOGS/gpu-check-logs.tar.gz, beside summary.md, and the loose
# copies removed (KEEP_LOOSE_LOGS=1 keeps them): a machine that returns only a
# few files of a run returns them all.
# Without a GPU it says so and fails at once; PIPETRAIN_GPU_CHECK_WITHOUT_GPU=1
# runs the rest anyway (tests/gpu/test_gpu_bundle.sh rehearses it so in CI).
# Exit status: 0 when every step ran and no test failed, 1 otherwise.
set -uo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
if [ ! -f "$HERE/tests.tsv" ]; then
  echo "gpu-check: $HERE is not a GPU bundle (no tests.tsv). Build one with 'make gpu-bundle'" \
    "and run pipetrain-gpu/gpu-check.sh from it (docs/gpu-check.md)." >&2
  exit 2
fi
BUDGET_S="${BUDGET_S:-420}"
LOGS="${LOGS:-$HERE/logs}"
START=$(date +%s)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 GTEST_COLOR=no
MPIRUN=(mpirun --oversubscribe --bind-to none)

declare -A RESULT  # summary cells of the steps
TEST_ROWS=()       # "| test | result |" rows, in run order
STATUS=0
SKIPPED_CASES=0

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
  timeout --kill-after=10 "$limit" "$@" </dev/null >"$LOGS/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$LOGS/$name.log"
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    RESULT[$name]="TIMEOUT after ${limit}s"
  elif [ $rc -ne 0 ]; then
    RESULT[$name]="FAILED (rc $rc, $name.log)"
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

# ---- 0. the machine, the libraries, the loader ----
# Python's package directories (site-packages and PYTHONPATH), where the
# nvidia-* wheels put CUDA's libraries.
site_dirs() {
  local py
  for py in python3 /opt/torch/.venv/bin/python3 /usr/bin/python3; do
    command -v "$py" >/dev/null 2>&1 &&
      "$py" -c 'import site, sys; print("\n".join(site.getsitepackages() + sys.path))' 2>/dev/null
  done | sort -u
}

# find_lib SONAME: the first directory holding it: $CUDA_HOME, the toolkit,
# then the wheels (site-packages/nvidia/*/lib).
find_lib() {
  local d
  for d in ${CUDA_HOME:+$CUDA_HOME/lib64} /usr/local/cuda/lib64 /usr/local/cuda/lib \
           /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -e "$d/$1" ] && { echo "$d"; return 0; }
  done
  for d in $(site_dirs); do
    [ -d "$d/nvidia" ] || continue
    find "$d/nvidia" -maxdepth 4 -name "$1" -printf '%h\n' 2>/dev/null | head -n 1 | grep . && return 0
  done
  return 1
}

# The bundle's environment: its libraries first, then CUDA's, then the
# relocated Open MPI. LIB_ROWS describes where each CUDA library came from.
# cuDNN and NVRTC (fused attention, #42) are linked, so needs.txt lists
# them: on a machine with PyTorch cuDNN is the nvidia-cudnn-cu13 wheel's,
# found through Python's site-packages like NCCL's (its folder also holds
# the sub-libraries cuDNN loads at run time); NVRTC is the toolkit's or a
# wheel's. cuDNN's runtime-compiled attention engines load NVRTC too.
setup_environment() {
  local lib dir dirs=() missing=()
  LIB_ROWS=()
  for lib in $(grep -E '^lib(cudart|cublas|cublasLt|nccl|cudnn|nvrtc)\.so' "$HERE/needs.txt"); do
    if dir=$(find_lib "$lib"); then
      LIB_ROWS+=("$lib: $dir")
      dirs+=("$dir")
    else
      LIB_ROWS+=("$lib: MISSING")
      missing+=("$lib")
    fi
  done
  local path
  path="$HERE/lib$(printf ':%s' $(printf '%s\n' "${dirs[@]}" | awk '!seen[$0]++'))"
  export LD_LIBRARY_PATH="$path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # Debian's Open MPI and PMIx, moved: OPAL_PREFIX moves Open MPI's paths;
  # PMIx needs its data (help files) and library (components) paths named.
  export OPAL_PREFIX="$HERE/ompi" PATH="$HERE/ompi/bin:$PATH" PMIX_PREFIX="$HERE/pmix" \
    PMIX_DATADIR="$HERE/pmix/share" PMIX_LIBDIR="$HERE/pmix/lib"
  RESULT[libs]=$([ ${#missing[@]} -eq 0 ] && echo ok || echo "FAILED: ${missing[*]} not in the toolkit or the wheels (set CUDA_HOME)")
  [ ${#missing[@]} -eq 0 ] || STATUS=1
}

# loader_check: every bundled program loads; the bundle's libstdc++ only if
# the machine's is too old; glibc must be at least what BUILD-INFO says.
# loader_problems PATTERN: the ldd lines of every bundled program that match.
loader_problems() {
  (cd "$HERE" && for f in bin/* tests/* ompi/bin/*; do ldd "$f" 2>&1 | sed "s|^|$f: |"; done) |
    grep -E "$1"
}

loader_check() {
  local bad
  bad=$(loader_problems "not found|GLIBCXX|GCC_|error while loading")
  if echo "$bad" | grep -qE "GLIBCXX|GCC_"; then
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$HERE/lib-fallback"
    FALLBACK=" (libstdc++ from the bundle: the machine's is older)"
    bad=$(loader_problems "not found|error while loading")
  fi
  local need have
  need=$(sed -n 's/^glibc_needed: //p' "$HERE/BUILD-INFO.txt")
  have=$(ldd --version 2>/dev/null | head -n 1 | grep -oE '[0-9]+\.[0-9]+$')
  if [ -n "$need" ] && [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n 1)" != "$need" ]; then
    bad="$bad glibc $have here, the bundle needs $need"
  fi
  if [ -n "$bad" ]; then
    echo "$bad" | head -n 20
    local missing
    missing=$(echo "$bad" | sed -nE 's/.*[[:space:]]([^[:space:]]+) => not found.*/\1/p
      s/.*error while loading shared libraries: ([^:]+):.*/\1/p' | xargs -r -n1 basename | sort -u | tr '\n' ' ')
    RESULT[loader]="FAILED: ${missing:+not found: $missing}$(echo "$bad" |
      grep -vE 'not found|error while loading' | head -n 2 | tr '\n' ';')"
    STATUS=1
  else
    RESULT[loader]="ok: every program loads, glibc $have${FALLBACK:-}"
  fi
}

machine() {
  GPU_SEEN=0
  echo "== machine: $(uname -srm); glibc $(ldd --version 2>/dev/null | head -n 1 | grep -oE '[0-9.]+$')"
  cat "$HERE/BUILD-INFO.txt"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,name,uuid,memory.total,driver_version --format=csv,noheader || true
    [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')" -gt 0 ] && GPU_SEEN=1
  fi
  if [ "$GPU_SEEN" = 1 ]; then
    RESULT[gpu]="ok: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1), driver $(nvidia-smi \
      --query-gpu=driver_version --format=csv,noheader | head -n 1)"
    export PIPETRAIN_REQUIRE_GPU=1  # from here on, a test without a device fails
  else
    RESULT[gpu]="FAILED: no GPU (nvidia-smi $(command -v nvidia-smi >/dev/null && echo lists none || echo not found))"
    STATUS=1
  fi
  setup_environment
  loader_check
  printf '%s\n' "${LIB_ROWS[@]}"
  run_step versions 20 "$HERE/bin/cuda_versions"
}

# ---- 2. tests: one row each ----
# classify NAME RC LOG: the row's result from the test's exit status and its
# GoogleTest lines (under mpirun only rank 0 prints them).
classify() {
  local name=$1 rc=$2 log=$3 passed skipped failed why
  passed=$(grep -Ec '\[       OK \] .*\([0-9]+ ms\)' "$log")
  skipped=$(grep -Ec '\[  SKIPPED \] .*\([0-9]+ ms\)' "$log")
  failed=$(grep -Ec '\[  FAILED  \] .*\([0-9]+ ms\)' "$log")
  why=$(grep -A1 -m1 ': Skipped$' "$log" | tail -n 1 | cut -c1-90)
  local total=$((passed + skipped + failed)) row
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    row="TIMEOUT ($passed of $total passed before it)"
  elif [ "$rc" -ne 0 ] || [ "$failed" -gt 0 ]; then
    row="FAILED: $failed of $total failed, rc $rc ($(basename "$log"))"
  elif [ "$total" -eq 0 ]; then
    row="FAILED: no test case ran ($(basename "$log"))"
  elif [ "$skipped" -gt 0 ]; then
    row="SKIPPED $skipped of $total: ${why:-see log}; $passed passed"
  else
    row="ok ($passed passed)"
  fi
  case $row in ok*|SKIPPED*) ;; *) STATUS=1 ;; esac
  SKIPPED_CASES=$((SKIPPED_CASES + skipped))
  TEST_ROWS+=("| $name | $row |")
}

# Every test gets up to 120 s, all of them together TESTS_S (default 240 s),
# so that the training run and the benchmarks keep their share.
run_tests() {
  local name np env exe args limit rc phase_end cmd kv
  phase_end=$(($(date +%s) + ${TESTS_S:-240}))
  while IFS=$'\t' read -r name np env exe args; do
    limit=$(left 120)
    limit=$((limit < phase_end - $(date +%s) ? limit : phase_end - $(date +%s)))
    if [ "$limit" -le 5 ]; then
      TEST_ROWS+=("| $name | NOT RUN (budget spent) |")
      STATUS=1
      continue
    fi
    cmd=(env)
    [ "$np" -gt 0 ] && cmd=("${MPIRUN[@]}" -np "$np")
    for kv in ${env//,/ }; do
      [ "$kv" = - ] && continue
      if [ "$np" -gt 0 ]; then cmd+=(-x "$kv"); else cmd+=("$kv"); fi
    done
    cmd+=("$HERE/$exe")
    echo "== $name (limit ${limit}s)"
    # shellcheck disable=SC2086  # args is a list of words from tests.tsv
    (cd "$LOGS" && timeout --kill-after=10 "$limit" "${cmd[@]}" $args) </dev/null >"$LOGS/$name.log" 2>&1
    rc=$?
    grep -E '\[ +(OK|SKIPPED|FAILED) +\]|Failure|max diff|rel error' "$LOGS/$name.log" | tail -n 15
    classify "$name" "$rc" "$LOGS/$name.log"
  done <"$HERE/tests.tsv"
}

# ---- 3. the application on the GPU: 2 ranks, a few steps, HDF5 outputs ----
train_run() {
  rm -rf "$LOGS/train"
  run_step train 90 "${MPIRUN[@]}" -np 2 "$HERE/bin/pipetrain" train "$HERE/inputs/gpt_markov.toml" \
    --set training.device='"cuda"' --set training.precision='"bf16"' --set training.steps=20 \
    --set training.eval_every=10 --set output.dir="\"$LOGS/train\"" || return 0
  [ -s "$LOGS/train/metrics.h5" ] && return 0
  RESULT[train]="FAILED: exit 0 but no train/metrics.h5"
  STATUS=1
}

mkdir -p "$LOGS"
rm -rf "${LOGS:?}"/*.log
machine
GO=$([ "$GPU_SEEN" = 1 ] || [ "${PIPETRAIN_GPU_CHECK_WITHOUT_GPU:-0}" = 1 ] && echo 1 || echo 0)
case ${RESULT[loader]} in ok*) ;; *) GO=0 ;; esac
if [ "$GO" = 1 ]; then
  run_tests
  train_run
  # The stage with the reference attention, then with cuDNN's fused one (#42).
  run_step bench_stage 130 "$HERE/bin/bench_cuda" stage --dims 2048 --seq 1024 --mb 8 \
    --blocks 2 --reps 5 --precision bf16 --attention reference,fused
  run_step bench_transport 70 "${MPIRUN[@]}" -np 2 "$HERE/bin/bench_cuda" transport \
    --mbytes 64 --reps 10
  # Two stages of 2 blocks, 8 micro-batches of 8 sequences, through the
  # Trainer: 2 warm-up steps, then the median of 5.
  run_step bench_pipeline 60 "${MPIRUN[@]}" -np 2 "$HERE/bin/bench_cuda" pipeline \
    --dims 2048 --seq 1024 --mb 8 --micro-batches 8 --blocks 2 --warmup 2 --reps 5 \
    --precision bf16 --schedule 1f1b --transport auto
fi

# ---- logs: one file ----
# pack_logs: every log and the training run's outputs (when under 8 MiB) into
# $LOGS/gpu-check-logs.tar (the summary joins it and it is compressed once the
# summary is written); LOGS_CELL describes the pack for the summary.
pack_logs() {
  local files left=""
  files=$(cd "$LOGS" && ls -1 -- *.log 2>/dev/null)
  if [ -d "$LOGS/train" ] && [ "$(du -sk "$LOGS/train" | cut -f1)" -le 8192 ]; then
    files="$files"$'\n'train
  elif [ -d "$LOGS/train" ]; then
    left="; train/ is over 8 MiB and stays loose"
  fi
  rm -f "$LOGS/gpu-check-logs.tar" "$LOGS/gpu-check-logs.tar.gz"
  # shellcheck disable=SC2086  # the names of this script's own logs: no spaces
  if [ -n "$files" ] && (cd "$LOGS" && tar -cf gpu-check-logs.tar $files); then
    PACKED="$files"
    LOGS_CELL="ok: $LOGS/gpu-check-logs.tar.gz holds $(echo "$files" | grep -c '\.log$') logs$(
      echo "$files" | grep -qx train && echo ", train/ (the run's outputs)") and summary.md$left"
  else
    PACKED=""
    LOGS_CELL="FAILED to pack: the logs stay loose in $LOGS"
  fi
}
pack_logs

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
PIPE_GPUS=$(value pipeline_gpus)
SUMMARY=$(cat <<EOF

================ pipetrain GPU check summary ($(($(date +%s) - START))s of ${BUDGET_S}s) ================
| check | result |
|---|---|
| bundle | $(sed -n 's/^commit: //p' "$HERE/BUILD-INFO.txt"), $(sed -n 's/^cuda_arch: //p' "$HERE/BUILD-INFO.txt") |
| GPU seen by nvidia-smi | ${RESULT[gpu]} |
| CUDA libraries | ${RESULT[libs]}: $(printf '%s; ' "${LIB_ROWS[@]}") |
| every bundled program loads | ${RESULT[loader]} |
| CUDA runtime / driver supports / devices (tiny query) | $(value cuda_runtime) / $(value cuda_driver) / $(value cuda_devices): ${RESULT[versions]:-NOT RUN} |
$(if [ ${#TEST_ROWS[@]} -gt 0 ]; then printf '%s\n' "${TEST_ROWS[@]}"; else echo "| GPU tests | NOT RUN |"; fi)
| pipetrain train, 2 ranks, bf16, 20 steps | ${RESULT[train]:-NOT RUN} |
| GPT stage step, bf16, d_model 2048, T 1024, mb 8 (ms) | $(value stage_step_ms_d2048) |
| stage MFU (%, of 989.4 TFLOP/s dense bf16) | $(value stage_mfu_pct_d2048) |
| same GEMMs on plain cuBLAS: MFU (%) / share of step (%) | $(value gemm_alone_mfu_pct_d2048) / $(value gemm_share_pct_d2048) |
| backend matmul() incl. casts vs plain cuBLAS (%) | $(value matmul_vs_cublas_pct_d2048) |
| same stage with fused attention (cuDNN SDPA, model.attention = "fused"): step (ms) / MFU (%) | $(value stage_step_ms_fused_d2048) / $(value stage_mfu_pct_fused_d2048) |
| mpi_staged 2 ranks, 64 MiB, each direction (GB/s) | $(value mpi_staged_gbps_64MiB) |
| nccl 2 ranks, 64 MiB, each direction (GB/s) | ${NCCL_CELL} |
| 2-stage GPT pipeline, bf16, d_model 2048, T 1024, 2 blocks a stage, 1F1B, 8 micro-batches of 8: ranks / GPUs / transport | $(value pipeline_ranks) / ${PIPE_GPUS} / $(value pipeline_transport)$([ "$PIPE_GPUS" = 1 ] && echo " (both ranks on one GPU: NCCL refuses that, mpi_staged is the fallback)") |
| pipeline step (ms) / model TFLOP/s | $(value pipeline_step_ms_d2048) / $(value pipeline_tflops_d2048) |
| pipeline MFU (%, of the GPUs its ranks drive: ${PIPE_GPUS} x 989.4 TFLOP/s) | $(value pipeline_mfu_pct_d2048) |
| pipeline bubble, measured / 1F1B with equal stages (%) | $(value pipeline_bubble_pct_d2048) / $(value pipeline_ideal_bubble_pct) |
| benchmarks | stage: ${RESULT[bench_stage]:-NOT RUN}; transport: ${RESULT[bench_transport]:-NOT RUN}; pipeline: ${RESULT[bench_pipeline]:-NOT RUN} |
| logs | ${LOGS_CELL} |
| verdict | ${VERDICT} |
EOF
)
# The summary joins the pack and stays beside it; the loose logs go, unless
# asked to stay.
printf '%s\n' "$SUMMARY" >"$LOGS/summary.md"
if [ -n "$PACKED" ] && (cd "$LOGS" && tar -rf gpu-check-logs.tar summary.md && gzip -f gpu-check-logs.tar); then
  if [ "${KEEP_LOOSE_LOGS:-0}" != 1 ]; then
    # shellcheck disable=SC2086  # the names packed above
    (cd "$LOGS" && rm -rf $PACKED)
  fi
else
  SUMMARY=${SUMMARY//"| logs | ${LOGS_CELL} |"/"| logs | FAILED to pack: the logs stay loose in $LOGS |"}
  printf '%s\n' "$SUMMARY" >"$LOGS/summary.md"
fi
printf '%s\n' "$SUMMARY"
exit $STATUS
