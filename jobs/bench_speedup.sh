#!/usr/bin/env bash
# bench_speedup.sh: pipeline speedup of a balanced MLP, 2 ranks vs 1 rank.
#
# Same deck (inputs/bench_mlp.toml: N = 8 micro-batches, one BLAS thread per
# rank) on 1 and on 2 ranks; throughput is the median step time over the
# steps after 2 warm-up steps, each configuration run REPEATS times (best
# run kept). Writes results/bench_speedup.md. Goal: >= 95% of the ideal
# speedup P*N/(N+P-1) = 1.78 (so >= 1.69x).
#   jobs/bench_speedup.sh            (or: make bench)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
DECK=${DECK:-inputs/bench_mlp.toml}
REPEATS=${REPEATS:-3}
PY=tools/.venv/bin/python
out=results/bench_speedup.md

median_step() {  # $1 = np, prints the best median step time (s) over REPEATS runs
  local np=$1 best=""
  for r in $(seq "$REPEATS"); do
    local dir=runs/bench_speedup_np${np}
    mpirun --oversubscribe --bind-to none -np "$np" build/pipetrain train "$DECK" \
      --set output.dir=\"$dir\" > "$dir.log" 2>&1 || { cat "$dir.log"; exit 1; }
    t=$($PY tools/metrics_summary.py "$dir/metrics.h5" --skip 2 --json |
        $PY -c 'import json,sys; print(json.load(sys.stdin)["median_step_time_s"])')
    best=$($PY -c "print(min(float('$t'), float('${best:-inf}')))")
  done
  echo "$best"
}

mkdir -p runs results
t1=$(median_step 1)
t2=$(median_step 2)
$PY - "$t1" "$t2" "$DECK" > "$out" <<'PYEOF'
import sys, datetime, platform, os
t1, t2, deck = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
batch, n, p = 256, 8, 2
ideal = p * n / (n + p - 1)
speedup = t1 / t2
print("# Pipeline speedup: balanced MLP, 2 ranks vs 1 rank (CPU backend)\n")
print(f"Command: `jobs/bench_speedup.sh` (deck `{deck}`, 1F1B, N = {n}, "
      "one BLAS thread per rank, median step time after 2 warm-up steps, best of "
      f"{os.environ.get('REPEATS', '3')} runs)\n")
print(f"Machine: {platform.node()}, {os.cpu_count()} cores; "
      f"{datetime.date.today().isoformat()}\n")
print("| ranks | step time (ms) | samples/s | speedup | ideal P*N/(N+P-1) | % of ideal |")
print("|---:|---:|---:|---:|---:|---:|")
print(f"| 1 | {t1*1e3:.1f} | {batch/t1:.1f} | 1.00 | 1.00 | 100.0 |")
print(f"| 2 | {t2*1e3:.1f} | {batch/t2:.1f} | {speedup:.2f} | {ideal:.2f} | "
      f"{100*speedup/ideal:.1f} |")
print(f"\nGoal: >= 95% of ideal ({0.95*ideal:.2f}x). "
      f"{'Met' if speedup >= 0.95*ideal else 'NOT met'}.")
PYEOF
cat "$out"
