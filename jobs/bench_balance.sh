#!/usr/bin/env bash
# bench_balance.sh: partitions of unbalanced models at P = 2 (issue #13,
# "Balance figures"): a GPT whose 4096-token LM head is a heavy last unit
# (inputs/gpt_heavy_head.toml) and an MLP whose 8192-wide first layer is a
# heavy first unit (inputs/mlp_wide_input.toml). For each model it runs the
# strategies uniform, time, memory and balanced (tracing on: measured
# utilisation = busy / span per stage, from tools/trace_report.py) and every
# contiguous partition [k, U - k] as an explicit list, and reports measured
# throughput and utilisation beside the planner's predictions, and how far
# balanced is from the best partition found by trying them all.
# Goal: balanced within 5% of the best. Writes results/bench_balance.md.
# Any deck of inputs/ with an MLP, GPT, cnn or hybrid model can be given in
# MODELS (jobs/bench_cnn_partition.sh runs it on the cnn family).
#   jobs/bench_balance.sh          (needs build/ and tools/.venv: make build tools)
#   REPS=3 jobs/bench_balance.sh   (every run REPS times, in rounds so that a
#                                   drift of the host's speed hits all alike;
#                                   the report takes medians and gives the spread)
#   REPORT_ONLY=1 jobs/bench_balance.sh  (the report again from the runs listed in
#                                   runs/bench_balance/runs.txt, the last ones made)
#   PLOT=x.png SEEDS="uniform=82,time=91" jobs/bench_balance.sh  (also a plot, with
#                                   reference utilisations beside the measured ones)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MODELS=${MODELS:-"gpt_heavy_head mlp_wide_input"}
REPS=${REPS:-1}
PY=tools/.venv/bin/python
WORK=runs/bench_balance
OUT=${OUT:-results/bench_balance.md}
mkdir -p "$WORK" results
list=$WORK/runs.txt

run() {  # model label trace SETTING...
  local model=$1 label=$2 trace=$3; shift 3
  local dir=$WORK/${model}_$label
  [ "$REPS" -gt 1 ] && dir=$dir.r$rep
  echo "bench_balance: $model $label"
  mpirun --oversubscribe --bind-to none -np 2 build/pipetrain train "inputs/$model.toml" \
    --set output.trace="$trace" --set output.dir=\""$dir"\" "$@" > "$dir.log" 2>&1 ||
    { tail -20 "$dir.log"; exit 1; }
  echo "$model $label $dir" >> "$list"
}

if [ -z "${REPORT_ONLY:-}" ]; then
: > "$list"
for rep in $(seq 1 "$REPS"); do
for model in $MODELS; do
  units=$($PY -c '
import sys, tomllib
m = tomllib.load(open(sys.argv[1], "rb"))["model"]
t = m.get("type", "mlp")
conv = m.get("stages", 3) * m.get("stage_blocks", 2)  # cnn, hybrid: residual blocks (family defaults)
print({"gpt": m.get("blocks"), "mlp": m.get("depth"), "cnn": conv, "hybrid": conv + m.get("blocks", 0)}[t])' "inputs/$model.toml")
  for s in uniform time memory balanced; do
    run "$model" "$s" true --set pipeline.partition=\""$s"\"
  done
  for k in $(seq 1 $((units - 1))); do
    run "$model" "k$k" false --set pipeline.partition="[$k, $((units - k))]"
  done
done
done
fi
$PY tools/balance_report.py --runs "$list" ${PLOT:+--plot "$PLOT"} ${SEEDS:+--seeds "$SEEDS"} > "$OUT"
cat "$OUT"
