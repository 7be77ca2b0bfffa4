#!/usr/bin/env bash
# scaling_study.sh: sweeps stage count P, micro-batch count N, schedule and
# recomputation policy on this machine and writes results/scaling_study.csv
# and plots (throughput, measured vs theoretical bubble, peak memory per stage).
# Every schedule runs as a deck leaves it (interleaved with 2 virtual stages per
# rank; zb-h1 and zb-v placed again at measured times after step 2); a
# combination the validator refuses (interleaved needs N a multiple of P) is
# skipped with its reason in the report. Runs are traced, so that the report
# takes each schedule's theoretical bubble from trace.h5 (theory_bubble).
#   jobs/scaling_study.sh                 # the default sweep (about 15 minutes here)
#   P_LIST="2 4 8" N_LIST="8 16 32" DECK=inputs/gpt_large.toml LAUNCH="srun --mpi=pmix" jobs/scaling_study.sh
# At scale under Slurm: allocate the largest P (e.g. salloc -N 2 --ntasks-per-node=4
# --gpus-per-task=1), then run this script inside the allocation with
# LAUNCH="srun --mpi=pmix -n" so each run uses the first P tasks.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
DECK=${DECK:-inputs/bench_gpt_scaling.toml}
P_LIST=${P_LIST:-"1 2 4"}
N_LIST=${N_LIST:-"1 2 4 8 16"}
SCHEDULES=${SCHEDULES:-"gpipe 1f1b interleaved zb-h1 zb-v"}
RECOMPUTE=${RECOMPUTE:-"none selective full"}   # swept at the largest P, N = 8, 1f1b
LAUNCH=${LAUNCH:-"mpirun --oversubscribe --bind-to none -np"}
out=${OUT:-results/scaling_study}  # OUT=/tmp/trial writes the report elsewhere
mkdir -p runs results
runs=()
skipped=()

run() {  # run P N SCHEDULE RECOMPUTE
  local dir="runs/scaling_p$1_n$2_$3_${4/:/_}" virtual=""
  [ "$3" = interleaved ] && virtual="--set pipeline.virtual_stages=2"
  local settings=(--set pipeline.micro_batches="$2" --set pipeline.schedule=\"$3\"
                  --set pipeline.recompute=\"$4\" $virtual)
  local refusal
  if ! refusal=$(build/pipetrain validate "$DECK" --ranks "$1" "${settings[@]}" 2>&1 >/dev/null); then
    refusal=${refusal#pipetrain: error: }
    skipped+=("P = $1, N = $2, $3: ${refusal#--set pipeline.schedule=*: }")
    return
  fi
  $LAUNCH "$1" build/pipetrain train "$DECK" "${settings[@]}" --set output.trace=true \
    --set output.dir=\"$dir\" > "$dir.log" 2>&1 || { cat "$dir.log"; exit 1; }
  runs+=("$1,$2,$3,$4,$dir")
}

for p in $P_LIST; do
  for n in $N_LIST; do
    for s in $SCHEDULES; do run "$p" "$n" "$s" none; done
  done
done
p_max=$(echo $P_LIST | tr ' ' '\n' | sort -n | tail -1)
for r in $RECOMPUTE; do [ "$r" = none ] || run "$p_max" 8 1f1b "$r"; done
tools/.venv/bin/python tools/scaling_report.py "$out" "${runs[@]}"
{
  echo "# Scaling study"
  echo
  echo "Command: \`jobs/scaling_study.sh\` (deck \`$DECK\`; P in {$P_LIST}, N in {$N_LIST},"
  echo "schedules {$SCHEDULES} with recompute none, plus {$RECOMPUTE} at P = $p_max, N = 8, 1f1b;"
  echo "launcher \`$LAUNCH\`; $(hostname), $(nproc) cores, $(date -u +%F)). Median samples/s and mean"
  echo "measured bubble over the steps after 2 warm-up steps (zb-h1 and zb-v: after the placement at"
  echo "measured times, from step 3); bubble theory: the schedule's unit-time bubble (trace.h5"
  echo "theory_bubble: (P-1)/(N+P-1) for gpipe and 1f1b, (P-1)/(2N+P-1) interleaved with 2 virtual"
  echo "stages, (P-1)/(3N+P-1) ZB-H1 for N >= P; ZB-V and the short runs simulated); peak memory of"
  echo "the largest stage."
  echo "Plots: ${out##*/}_throughput.png, ${out##*/}_bubble.png, ${out##*/}_memory.png."
  echo "With more ranks than cores (--oversubscribe) a descheduled rank counts as idle, so"
  echo "the measured bubble of those runs is not comparable with the theory."
  if [ ${#skipped[@]} -gt 0 ]; then
    echo
    echo "Skipped, refused by \`pipetrain validate\`:"
    for line in "${skipped[@]}"; do echo "- ${line%%$'\n'*}"; done
  fi
  echo
  tools/.venv/bin/python tools/run_identity.py "${runs[0]##*,}/metrics.h5"
  echo
  cat "$out.md"
} > "$out.md.tmp" && mv "$out.md.tmp" "$out.md"
echo "wrote $out.csv, $out.md and ${out}_*.png"
