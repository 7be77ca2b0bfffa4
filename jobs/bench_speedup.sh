#!/usr/bin/env bash
# bench_speedup.sh: pipeline speedup of a balanced MLP, 2 ranks vs 1 rank.
#
# Same deck (inputs/bench_mlp.toml: 16 Linear layers of 1024 x 1024, N = 8
# micro-batches, one BLAS thread per rank) on 1 and on 2 ranks, for global
# batches of 512 and 256 (micro-batches of 64 and 32 rows). Step time is the
# median over the steps after 2 warm-up steps; each configuration runs
# REPEATS times and the best run is kept. Writes results/bench_speedup.md.
# Goal: >= 95% of the ideal speedup P*N/(N+P-1) = 1.78 (so >= 1.69x).
#   jobs/bench_speedup.sh            (or: make bench)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
DECK=${DECK:-inputs/bench_mlp.toml}
REPEATS=${REPEATS:-3}
BATCHES=${BATCHES:-"512 256"}
PY=tools/.venv/bin/python
out=results/bench_speedup.md

median_step() {  # $1 = np, $2 = batch: prints the best median step time (s) over REPEATS runs
  local np=$1 batch=$2 best=""
  for r in $(seq "$REPEATS"); do
    local dir=runs/bench_speedup_np${np}_b${batch}
    mpirun --oversubscribe --bind-to none -np "$np" build/pipetrain train "$DECK" \
      --set training.batch_size="$batch" --set output.dir=\"$dir\" > "$dir.log" 2>&1 ||
      { cat "$dir.log"; exit 1; }
    t=$($PY tools/metrics_summary.py "$dir/metrics.h5" --skip 2 --json |
        $PY -c 'import json,sys; print(json.load(sys.stdin)["median_step_time_s"])')
    best=$($PY -c "print(min(float('$t'), float('${best:-inf}')))")
  done
  echo "$best"
}

mkdir -p runs results
rows=()
for batch in $BATCHES; do
  rows+=("$batch $(median_step 1 "$batch") $(median_step 2 "$batch")")
done
identity=$($PY tools/run_identity.py runs/bench_speedup_np2_b${BATCHES%% *}/metrics.h5)
$PY - "$DECK" "$REPEATS" "$identity" "${rows[@]}" > "$out" <<'PYEOF'
import sys, datetime, platform, os
deck, repeats, identity, rows = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
n, p = 8, 2
ideal = p * n / (n + p - 1)
print("# Pipeline speedup: balanced MLP, 2 ranks vs 1 rank (CPU backend)\n")
print(f"Command: `jobs/bench_speedup.sh` (deck `{deck}`, 1F1B, N = {n}, one BLAS thread "
      f"per rank, median step time after 2 warm-up steps, best of {repeats} runs).\n")
print(f"{identity}\n")
print("| batch | rows per micro-batch | ranks | step time (ms) | samples/s | speedup | ideal P*N/(N+P-1) | % of ideal |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
for row in rows:
    batch, t1, t2 = row.split()
    batch, t1, t2 = int(batch), float(t1), float(t2)
    s = t1 / t2
    print(f"| {batch} | {batch // n} | 1 | {t1*1e3:.1f} | {batch/t1:.1f} | 1.00 | 1.00 | 100.0 |")
    print(f"| {batch} | {batch // n} | 2 | {t2*1e3:.1f} | {batch/t2:.1f} | {s:.2f} | {ideal:.2f} | {100*s/ideal:.1f} |")
print(f"\nGoal: >= 95% of ideal ({0.95*ideal:.2f}x).")
PYEOF
cat "$out"
