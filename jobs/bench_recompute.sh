#!/usr/bin/env bash
# bench_recompute.sh: activation memory and step time of each recomputation
# policy on a GPT with P = 4 stages and N = 8 micro-batches (1F1B), on this
# machine. Writes results/bench_recompute.{md,csv,png}.
# Goal: full needs >= 3x less activation memory than none at <= 30% extra step
# time, and selective sits between them.
#   jobs/bench_recompute.sh            (needs build/ and tools/.venv: make build tools)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
DECK=${DECK:-inputs/bench_gpt_recompute.toml}
NP=${NP:-4}
mkdir -p runs results
args=()
for policy in none selective every:2 full; do
  dir=runs/bench_recompute_${policy/:/_}
  mpirun --oversubscribe --bind-to none -np "$NP" build/pipetrain train "$DECK" \
    --set pipeline.recompute=\"$policy\" --set output.dir=\"$dir\" > "$dir.log" 2>&1 ||
    { cat "$dir.log"; exit 1; }
  args+=("$policy=$dir")
done
tools/.venv/bin/python tools/recompute_report.py results/bench_recompute "${args[@]}"
{
  echo "# Activation recomputation: memory and step time per policy"
  echo
  echo "Command: \`jobs/bench_recompute.sh\` (deck \`$DECK\`: GPT, 4 stages x 2 blocks,"
  echo "d_model 128, T = 128, N = 8 micro-batches of 4, 1F1B, $NP ranks on $(nproc) cores,"
  echo "one BLAS thread per rank; peak over steps 3-14, median step time)."
  tools/.venv/bin/python tools/run_identity.py runs/bench_recompute_none/metrics.h5
  echo
  cat results/bench_recompute.md
  echo
  echo "![memory and step time](bench_recompute.png)"
} > results/bench_recompute.tmp && mv results/bench_recompute.tmp results/bench_recompute.md
cat results/bench_recompute.md
