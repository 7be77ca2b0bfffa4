#!/usr/bin/env bash
# bench_bubble.sh: measured pipeline bubble of 1F1B with P = 2 against the
# theory (P-1)/(N+P-1), for N in 2, 4, 8, 16, from trace.h5 (trace_report.py),
# on the balanced MLP of inputs/bench_mlp.toml (one BLAS thread per rank).
# Goal: within 3 percentage points of theory, i.e. the runtime adds little of
# its own. Writes results/bench_bubble.md and the timeline of N = 8,
# results/bench_bubble_timeline_n8.png.
#   jobs/bench_bubble.sh            (needs build/ and tools/.venv: make build tools)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
DECK=${DECK:-inputs/bench_mlp.toml}
PY=tools/.venv/bin/python
out=results/bench_bubble.md
mkdir -p runs results
rows=""
for n in 2 4 8 16; do
  dir=runs/bench_bubble_n$n
  mpirun --oversubscribe --bind-to none -np 2 build/pipetrain train "$DECK" \
    --set pipeline.micro_batches=$n --set pipeline.schedule=\"1f1b\" --set output.trace=true \
    --set output.dir=\"$dir\" > "$dir.log" 2>&1 || { cat "$dir.log"; exit 1; }
  row=$($PY tools/trace_report.py "$dir/trace.h5" --skip 2 --json | $PY -c '
import json, sys
r = json.load(sys.stdin)
m, t = 100 * r["bubble"], 100 * r["bubble_theory"]
ok = "yes" if abs(m - t) <= 3 else "no"
print("| %d | %.1f%% | %.1f%% | %+.1f | %s | %.2f |" % (r["num_micro_batches"], t, m, m - t, ok, r["imbalance"]))')
  rows+="$row"$'\n'
  [ "$n" = 8 ] && $PY tools/trace_timeline.py "$dir/trace.h5" results/bench_bubble_timeline_n8.png > /dev/null
done
{
  echo "# Measured pipeline bubble, 1F1B, P = 2 (CPU backend)"
  echo
  echo "Command: \`jobs/bench_bubble.sh\` (deck \`$DECK\`: 16 Linear layers of 1024 x 1024,"
  echo "batch 512, 2 ranks with one BLAS thread each, tracing on; steps 3-12 from"
  echo "\`tools/trace_report.py --skip 2\`)."
  tools/.venv/bin/python tools/run_identity.py runs/bench_bubble_n2/metrics.h5
  echo
  echo "| N | theory (P-1)/(N+P-1) | measured | difference (points) | within 3 points | stage imbalance |"
  echo "|---:|---:|---:|---:|---|---:|"
  printf "%s" "$rows"
  echo
  echo "Measured bubble = mean over ranks and steps of 1 - (F + B time without"
  echo "waits) / (longest rank's span of the step's schedule); see docs/outputs.md."
  echo
  echo "![timeline N = 8](bench_bubble_timeline_n8.png)"
} > "$out"
cat "$out"
