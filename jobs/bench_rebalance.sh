#!/usr/bin/env bash
# bench_rebalance.sh: dynamic rebalancing against the best static partition
# (issue #14, docs/rebalance.md). On 2 ranks, for the MLP deck
# (inputs/bench_mlp.toml) and the GPT deck (inputs/gpt_markov.toml), rank 1
# is slowed 2x from step S ([slowdown]): two runs rebalance
# (rebalance.enabled = true), two runs per contiguous partition [k, U - k]
# train with the slowdown on from the first step and no rebalancing. The
# report gives throughput before the slowdown, just after it, after the
# rebalance, and the best static partition; goal: after the rebalance within
# 10% of the best static partition, reached within a few checks. Writes
# results/bench_rebalance.md and results/bench_rebalance.png.
#   jobs/bench_rebalance.sh          (needs build/ and tools/.venv: make build tools)
#   QUICK=1 jobs/bench_rebalance.sh  (fewer steps: a smoke check of the job)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MODELS=${MODELS:-"bench_mlp gpt_markov"}
PY=tools/.venv/bin/python
WORK=${WORK:-runs/bench_rebalance}
OUT=${OUT:-results/bench_rebalance}
FACTOR=${FACTOR:-2.0}
mkdir -p "$WORK" "$(dirname "$OUT")"
list=$WORK/runs.txt
: > "$list"
cut -d' ' -f1-3 /proc/loadavg > "$WORK/load_start"  # the report names the machine's load

# Per model: steps of the rebalancing run, the slowdown step S, steps
# between checks, steps of each static run.
settings() {
  case $1 in
    bench_mlp) echo "100 30 10 12" ;;
    gpt_markov) echo "300 90 20 40" ;;
    *) echo "100 30 10 12" ;;
  esac
}

run() {  # model label SETTING...
  local model=$1 label=$2; shift 2
  local dir=$WORK/${model}_$label
  echo "bench_rebalance: $model $label"
  mpirun --oversubscribe --bind-to none -np 2 build/pipetrain train "inputs/$model.toml" \
    --set training.eval_every=0 --set output.log_every=1000 --set output.dir=\""$dir"\" \
    --set slowdown.rank=1 --set slowdown.factor="$FACTOR" "$@" > "$dir.log" 2>&1 ||
    { tail -20 "$dir.log"; exit 1; }
  echo "$model $label $dir" >> "$list"
}

for model in $MODELS; do
  read -r steps slow every static <<< "$(settings "$model")"
  if [ -n "${QUICK:-}" ]; then steps=$((steps / 2)); slow=$((slow / 2)); static=$((static / 2 > 12 ? static / 2 : 12)); fi
  units=$($PY -c 'import sys, tomllib; m = tomllib.load(open(sys.argv[1], "rb"))["model"]; print(m.get("blocks") if m["type"] == "gpt" else m["depth"])' "inputs/$model.toml")
  # Two rebalancing runs: the report details the one less disturbed by other
  # processes (the faster before the slowdown) and lists both.
  for pass in 1 2; do
    run "$model" "dynamic.$pass" --set training.steps="$steps" --set slowdown.from_step="$slow" \
      --set rebalance.enabled=true --set rebalance.every="$every"
  done
  # Two passes over the partitions: the report keeps each one's faster pass,
  # so a burst of load from other processes rarely spoils both.
  for pass in 1 2; do
    for k in $(seq 1 $((units - 1))); do
      run "$model" "k$k.$pass" --set training.steps="$static" --set slowdown.from_step=0 \
        --set pipeline.partition="[$k, $((units - k))]"
    done
  done
done
cut -d' ' -f1-3 /proc/loadavg > "$WORK/load_end"
$PY tools/rebalance_report.py --runs "$list" --factor "$FACTOR" --plot "$OUT.png" > "$OUT.md"
cat "$OUT.md"
