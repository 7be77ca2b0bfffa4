#!/usr/bin/env bash
# bench_peer.sh: pipetrain against a PyTorch peer, side by side (issue #12).
#
# The peer (tools/peer/torch_pipeline.py) trains the same model with
# torch.distributed.pipelining: gloo, Schedule1F1B, one process per stage,
# one thread per process. It reads the deck that pipetrain resolves for the
# same run (`pipetrain validate`), so model, batch, micro-batch count and
# optimizer settings are the same by construction. Workloads, 1 and 2 stages:
#   mlp512  inputs/bench_mlp.toml (16 Linear layers of 1024 x 1024), batch 512, N = 8
#   mlp256  the same, batch 256
#   gpt     inputs/gpt_markov.toml (its batch, sequence, width, heads, blocks), N = 8
# Each repetition runs, per workload, pipetrain and the peer alternately on 2
# and on 1 process (the order flips every repetition); each run does WARMUP +
# STEPS steps and its steady-state step time is the median of the last STEPS.
# With STEP_WG=1 (the default) every repetition also runs pipetrain with
# pipeline.weight_grad = "step" (each stage's weight gradients in one pass
# after its last B, one GEMM per weight over all 8 micro-batches; program
# "pipetrain-step" in the tables), in the same alternating order.
# Both programs are started by the same mpirun line. Writes
# results/bench_peer.csv (one row per run), results/bench_peer_limits.csv (the
# GEMM limit of each workload, measured in each repetition; see measure_limit)
# and results/bench_peer.md
# (medians and min-max over the repetitions, the 2-vs-1 speedups and the
# ratio pipetrain/peer). torch is installed into tools/.venv from
# tools/requirements-peer.txt by this script only.
# On a shared machine each workload's four runs of a repetition wait up to
# QUIET_MAX_WAIT s (default 60; 0 = never) for other processes to use less
# than QUIET_CORES (0.2) cores; the CPU the others took during each run is
# recorded and reported.
#   jobs/bench_peer.sh                       # REPEATS=5 WORKLOADS="mlp512 mlp256 gpt"
#   REPEATS=3 WORKLOADS=gpt jobs/bench_peer.sh
#   APPEND=1 REPEATS=4 jobs/bench_peer.sh    # 4 more repetitions added to results/bench_peer.csv
#   PERSONALITY=avx2 REPEATS=3 jobs/bench_peer.sh   # as on an AVX2-only CPU (results/bench_peer_avx2.md)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One thread per process on both sides (the decks set training.blas_threads = 1).
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
REPEATS=${REPEATS:-5}
WORKLOADS=${WORKLOADS:-"mlp512 mlp256 gpt"}
RUN_TIMEOUT=${RUN_TIMEOUT:-300}   # seconds one run may take before it is killed
STEP_WG=${STEP_WG:-1}             # 1: pipetrain with pipeline.weight_grad = "step" too
# PERSONALITY=avx2: both programs as on an AVX2-only CPU, on any x86 machine:
# oneDNN capped at AVX2 (pipetrain's and torch's), OpenBLAS's Haswell
# kernels, MKL capped at AVX2 and ATen's CPU kernels at avx2 (torch);
# reports go to results/bench_peer_avx2.{md,csv}. Default: the CPU's own.
PERSONALITY=${PERSONALITY:-native}
case $PERSONALITY in
  native) suffix="" ;;
  avx2)
    export ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell MKL_ENABLE_INSTRUCTIONS=AVX2 ATEN_CPU_CAPABILITY=avx2
    suffix=_avx2 ;;
  *) echo "bench_peer: error: PERSONALITY must be native or avx2, not '$PERSONALITY'" >&2; exit 1 ;;
esac
OUT_MD=${OUT_MD:-results/bench_peer$suffix.md}
OUT_CSV=${OUT_CSV:-results/bench_peer$suffix.csv}
MPIRUN=(mpirun --oversubscribe --bind-to none)
PY=tools/.venv/bin/python
WORK=runs/bench_peer

die() { echo "bench_peer: error: $*" >&2; exit 1; }

[ -x build/pipetrain ] && [ -x build/bench_gemm ] || die "build/pipetrain or build/bench_gemm not found: run 'make build' first"
command -v mpirun > /dev/null || die "mpirun not found (Open MPI)"

# ---- tools/.venv with torch (only here: make tools / make test stay light) ----
scripts/setup-tools-venv.sh
peer_stamp=tools/.venv/.requirements-peer.stamp
if ! { [ -f "$peer_stamp" ] && cmp -s tools/requirements-peer.txt "$peer_stamp"; }; then
  echo "bench_peer: installing torch into tools/.venv (tools/requirements-peer.txt; a large download)"
  tools/.venv/bin/pip install -q -r tools/requirements-peer.txt || die "pip install of tools/requirements-peer.txt failed"
  cp tools/requirements-peer.txt "$peer_stamp"
fi
$PY -c 'import torch, torch.distributed as d; assert d.is_gloo_available(), "torch without gloo"' ||
  die "torch in tools/.venv cannot be imported or has no gloo backend"

# ---- runs in their own session, killed with every rank on timeout or exit ----
RUN_SID=""
kill_session() {  # every process of session $1 (the launcher and its ranks)
  local sid=$1 pids
  pids=$(ps -eo pid=,sid= | awk -v s="$sid" '$2 == s { print $1 }')
  [ -n "$pids" ] || return 0
  kill -TERM $pids 2> /dev/null || true
  sleep 2
  pids=$(ps -eo pid=,sid= | awk -v s="$sid" '$2 == s { print $1 }')
  [ -z "$pids" ] || kill -KILL $pids 2> /dev/null || true
}
cleanup() { if [ -n "$RUN_SID" ]; then kill_session "$RUN_SID"; fi; }
trap cleanup EXIT
trap 'echo "bench_peer: interrupted" >&2; exit 130' INT TERM

cpu_ticks() {  # "busy total" jiffies of the whole machine, and this shell's reaped children's
  local _ user nice sys idle iowait irq softirq steal rest
  read -r _ user nice sys idle iowait irq softirq steal rest < /proc/stat
  local self
  self=$(cut -d' ' -f16,17 /proc/$$/stat)  # cutime cstime: the runs this shell waited for
  echo "$((user + nice + sys + irq + softirq + steal)) $((user + nice + sys + idle + iowait + irq + softirq + steal)) $((${self% *} + ${self#* }))"
}

RUN_OTHER=""  # cores kept busy by other processes during the last run
run_limited() {  # LOG CMD...: CMD with a time limit; ranks that outlive it are ended
  local log=$1 rc=0 before after
  shift
  before=$(cpu_ticks)
  # A background job of a non-interactive shell is no group leader, so
  # setsid makes it a session leader without forking: its pid is the session.
  setsid timeout --kill-after=15 "$RUN_TIMEOUT" "$@" > "$log" 2>&1 &
  RUN_SID=$!
  wait "$RUN_SID" || rc=$?
  after=$(cpu_ticks)
  kill_session "$RUN_SID"
  RUN_SID=""
  # (machine busy - this run's own CPU) / wall time, in cores
  RUN_OTHER=$(echo "$before $after $(nproc)" | awk '{ busy = $4 - $1; total = $5 - $2; own = $6 - $3;
    printf "%.2f", (total > 0 ? (busy - own) * $7 / total : 0) }')
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "bench_peer: error: timed out after ${RUN_TIMEOUT} s (RUN_TIMEOUT): $*" >&2
  fi
  if [ "$rc" -ne 0 ]; then
    echo "---- last lines of $log ----" >&2
    tail -n 30 "$log" >&2
    echo "bench_peer: run failed (exit $rc): $*" >&2
  fi
  return "$rc"
}

run_twice() {  # LOG CMD...: run_limited, tried a second time after a failure (logged)
  local log=$1
  shift
  run_limited "$log" "$@" && return 0
  cp "$log" "$log.failed"
  echo "bench_peer: retrying once (the failed run's log: $log.failed)" >&2
  run_limited "$log" "$@" || die "the run failed twice: $*"
}

# On a shared machine, wait (up to QUIET_MAX_WAIT s) before each workload's four
# runs until other processes use less than QUIET_CORES cores over 3 s; then run
# anyway. Every run records what the others took (other_cores in the CSV).
QUIET_MAX_WAIT=${QUIET_MAX_WAIT:-60}
QUIET_CORES=${QUIET_CORES:-0.2}
wait_quiet() {
  local waited=0 a b busy=""
  [ "$QUIET_MAX_WAIT" -gt 0 ] || return 0
  while [ "$waited" -lt "$QUIET_MAX_WAIT" ]; do
    a=$(cpu_ticks); sleep 3; b=$(cpu_ticks)
    busy=$(echo "$a $b $(nproc)" | awk '{ t = $5 - $2; printf "%.2f", (t > 0 ? ($4 - $1) * $7 / t : 0) }')
    if awk -v b="$busy" -v q="$QUIET_CORES" 'BEGIN { exit !(b < q) }'; then return 0; fi
    waited=$((waited + 3))
  done
  echo "bench_peer: the machine stayed busy (other processes: $busy cores); running anyway"
}

free_port() {
  $PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# ---- workloads: deck, --set overrides, warm-up and timed steps ----
workload() {  # sets DECK SETS WARMUP STEPS for workload $1
  case $1 in
    mlp512) DECK=inputs/bench_mlp.toml; SETS=(--set training.batch_size=512); WARMUP=3; STEPS=10 ;;
    mlp256) DECK=inputs/bench_mlp.toml; SETS=(--set training.batch_size=256); WARMUP=3; STEPS=12 ;;
    gpt) DECK=inputs/gpt_markov.toml; SETS=(--set training.eval_every=0); WARMUP=5; STEPS=40 ;;
    *) die "unknown workload '$1' (mlp512 mlp256 gpt)" ;;
  esac
  SETS+=(--set training.steps=$((WARMUP + STEPS)) --set output.log_every=1
         --set pipeline.micro_batches=8 --set pipeline.schedule=\"1f1b\" --set pipeline.timeout_s=60)
}

rm -rf "$WORK"
mkdir -p "$WORK" results
commands=$WORK/commands.txt
: > "$commands"
for w in $WORKLOADS; do
  workload "$w"
  # The deck pipetrain resolves (every key, defaults included) is the peer's input.
  build/pipetrain validate "$DECK" --ranks 2 "${SETS[@]}" > "$WORK/$w.validate.txt" 2>&1 ||
    { cat "$WORK/$w.validate.txt"; die "pipetrain validate failed for $w"; }
  sed '/^schedule [^=]*:/,$d' "$WORK/$w.validate.txt" > "$WORK/$w.resolved.toml"
  $PY -c 'import sys, tomllib; tomllib.load(open(sys.argv[1], "rb"))' "$WORK/$w.resolved.toml" ||
    die "could not parse the resolved deck $WORK/$w.resolved.toml"
  {
    echo "$w pipetrain: ${MPIRUN[*]} -np P build/pipetrain train $DECK ${SETS[*]} --set output.dir=\"DIR\""
    [ "$STEP_WG" = 1 ] &&
      echo "$w pipetrain-step: the same with --set pipeline.weight_grad=\"step\""
    echo "$w peer:      MASTER_ADDR=127.0.0.1 MASTER_PORT=PORT ${MPIRUN[*]} -np P -x MASTER_ADDR -x MASTER_PORT -x OMP_NUM_THREADS -x MKL_NUM_THREADS $PY tools/peer/torch_pipeline.py --deck $WORK/$w.resolved.toml --warmup $WARMUP --timeout 60 --out FILE.json"
  } >> "$commands"
done

csv=$WORK/runs.csv
header="workload,program,procs,rep,batch,warmup,steps,median_step_s,samples_per_s,first_loss,last_loss,load1_before,other_cores"
first_rep=1
if [ "${APPEND:-0}" = 1 ] && [ -f "$OUT_CSV" ]; then
  # Add repetitions to an earlier measurement (same header): numbering goes on.
  [ "$(head -n 1 "$OUT_CSV")" = "$header" ] || die "APPEND=1: $OUT_CSV has another header"
  cp "$OUT_CSV" "$csv"
  first_rep=$(( $(tail -n +2 "$csv" | cut -d, -f4 | sort -n | tail -n 1) + 1 ))
else
  echo "$header" > "$csv"
fi
last_rep=$((first_rep + REPEATS - 1))

run_pipetrain() {  # workload np rep [program: pipetrain | pipetrain-step]
  local w=$1 np=$2 rep=$3 prog=${4:-pipetrain} dir load extra=()
  dir=$WORK/$1/${prog}_np$2_r$3
  [ "$prog" = pipetrain-step ] && extra=(--set pipeline.weight_grad=\"step\")
  load=$(cut -d' ' -f1 /proc/loadavg)
  mkdir -p "$WORK/$w"
  run_twice "$dir.log" "${MPIRUN[@]}" -np "$np" build/pipetrain train "$DECK" "${SETS[@]}" \
    "${extra[@]}" --set output.dir=\""$dir"\"
  $PY tools/peer/run_row.py "$prog" "$dir/metrics.h5" --workload "$w" --procs "$np" --rep "$rep" \
    --batch "$(batch_of "$w")" --warmup "$WARMUP" --load "$load" --other "$RUN_OTHER" >> "$csv"
}
run_step() {  # workload np rep: pipetrain-step when STEP_WG=1
  if [ "$STEP_WG" = 1 ]; then run_pipetrain "$1" "$2" "$3" pipetrain-step; fi
}

run_peer() {  # workload np rep
  local w=$1 np=$2 rep=$3 out=$WORK/$1/peer_np$2_r$3 port load
  load=$(cut -d' ' -f1 /proc/loadavg)
  mkdir -p "$WORK/$w"
  port=$(free_port)
  export MASTER_ADDR=127.0.0.1 MASTER_PORT=$port
  run_twice "$out.log" "${MPIRUN[@]}" -np "$np" \
    -x MASTER_ADDR -x MASTER_PORT -x OMP_NUM_THREADS -x MKL_NUM_THREADS \
    $PY tools/peer/torch_pipeline.py --deck "$WORK/$w.resolved.toml" --warmup "$WARMUP" \
    --timeout 60 --out "$out.json"
  $PY tools/peer/run_row.py peer "$out.json" --workload "$w" --procs "$np" --rep "$rep" \
    --warmup "$WARMUP" --load "$load" --other "$RUN_OTHER" >> "$csv"
}

# The GEMM limit of a workload (build/bench_gemm: the deck's micro-batch GEMMs
# alone on one core, per library; P stages at most P x that rate x N/(N+P-1);
# and the same GEMMs on buffers laid out as the model's own matrices),
# measured in every repetition beside the runs it bounds.
limits=$WORK/limits.csv
if [ "${APPEND:-0}" = 1 ] && [ -f "${OUT_CSV%.csv}_limits.csv" ]; then
  cp "${OUT_CSV%.csv}_limits.csv" "$limits"
else
  echo "workload,rep,library,gemm_ms,gemm_gflops,model_ms,limit_1,limit_2,model_gemm_ms,model_limit_1,model_limit_2" > "$limits"
fi
measure_limit() {  # workload rep
  build/bench_gemm "$DECK" "${SETS[@]}" --stages 2 --reps 11 --tsv > "$WORK/limit.tsv" ||
    die "build/bench_gemm failed for $1"
  awk -F'\t' -v w="$1" -v r="$2" 'BEGIN { OFS = "," } { gsub(",", ";", $1); print w, r, $1, $2, $3, $4, $5, $6, $7, $8, $9 }' \
    "$WORK/limit.tsv" >> "$limits"
}

batch_of() {  # the resolved batch size of workload $1
  $PY -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["training"]["batch_size"])' \
    "$WORK/$1.resolved.toml"
}

for rep in $(seq "$first_rep" "$last_rep"); do
  for w in $WORKLOADS; do
    workload "$w"
    wait_quiet
    echo "bench_peer: repetition $rep/$last_rep, $w (load $(cut -d' ' -f1-3 /proc/loadavg))"
    measure_limit "$w" "$rep"
    if [ $((rep % 2)) -eq 1 ]; then
      run_pipetrain "$w" 2 "$rep"; run_step "$w" 2 "$rep"; run_peer "$w" 2 "$rep"
      run_pipetrain "$w" 1 "$rep"; run_step "$w" 1 "$rep"; run_peer "$w" 1 "$rep"
    else
      run_peer "$w" 2 "$rep"; run_step "$w" 2 "$rep"; run_pipetrain "$w" 2 "$rep"
      run_peer "$w" 1 "$rep"; run_step "$w" 1 "$rep"; run_pipetrain "$w" 1 "$rep"
    fi
  done
done

cp "$csv" "$OUT_CSV"
cp "$limits" "${OUT_CSV%.csv}_limits.csv"
$PY tools/peer/bench_report.py --csv "$OUT_CSV" --limits "${OUT_CSV%.csv}_limits.csv" \
  --commands "$commands" --repeats "$last_rep" --pipetrain build/pipetrain > "$WORK/report.md"
if [ "$PERSONALITY" = avx2 ]; then
  # The personality under the title, so no figure is read as the CPU's own.
  awk 'NR == 2 { print; print "**CPU personality: AVX2** (`PERSONALITY=avx2`): ONEDNN_MAX_CPU_ISA=AVX2, OPENBLAS_CORETYPE=Haswell, MKL_ENABLE_INSTRUCTIONS=AVX2 and ATEN_CPU_CAPABILITY=avx2 for both programs, as on an AVX2-only CPU; the machine line names the kernels that ran."; print ""; next } { print }' \
    "$WORK/report.md" > "$OUT_MD"
else
  cp "$WORK/report.md" "$OUT_MD"
fi
cat "$OUT_MD"
