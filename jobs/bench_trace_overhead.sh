#!/usr/bin/env bash
# bench_trace_overhead.sh: step time with tracing on vs off (goal: <= 2%).
# Runs the same deck alternately with output.trace = false and true, REPEATS
# times each, and compares the median step times (steps after 2 warm-up).
# Writes results/bench_trace_overhead.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
DECK=${DECK:-inputs/bench_gpt_scaling.toml}
NP=${NP:-2}
REPEATS=${REPEATS:-5}
PY=tools/.venv/bin/python
mkdir -p runs results
for r in $(seq "$REPEATS"); do
  order="false true"; [ $((r % 2)) = 0 ] && order="true false"  # flip the order every repetition
  for trace in $order; do
    dir=runs/bench_trace_${trace}_$r
    mpirun --oversubscribe --bind-to none -np "$NP" build/pipetrain train "$DECK" \
      --set output.trace=$trace --set training.steps=12 --set output.dir=\"$dir\" > "$dir.log" 2>&1 ||
      { cat "$dir.log"; exit 1; }
  done
done
$PY - "$REPEATS" "$DECK" "$NP" "$($PY tools/run_identity.py runs/bench_trace_false_1/metrics.h5)" \
  > results/bench_trace_overhead.md <<'PYEOF'
import sys, h5py, numpy as np, datetime, os, platform
repeats, deck, np_ranks = int(sys.argv[1]), sys.argv[2], sys.argv[3]
def run_times(flag, r):
    with h5py.File(f"runs/bench_trace_{flag}_{r}/metrics.h5") as f:
        return np.asarray(f["step_time_s"])[2:]
reps = range(1, repeats + 1)
off = np.concatenate([run_times("false", r) for r in reps])
on = np.concatenate([run_times("true", r) for r in reps])
# The machine's speed drifts between runs by more than tracing costs, so the
# overhead is taken per repetition (the two runs side by side), then the median.
ratios = np.array([np.median(run_times("true", r)) / np.median(run_times("false", r)) for r in reps])
off_medians = np.array([np.median(run_times("false", r)) for r in reps])
print("# Tracing overhead\n")
print(f"Command: `jobs/bench_trace_overhead.sh` (deck `{deck}`, {np_ranks} ranks, 12 steps, "
      f"first 2 dropped, {repeats} repetitions of one run each, their order flipped every "
      f"repetition).\n\n{sys.argv[4]}\n")
print("| tracing | median step time (ms) | steps timed |")
print("|---|---:|---:|")
print(f"| off | {1e3 * np.median(off):.2f} | {len(off)} |")
print(f"| on | {1e3 * np.median(on):.2f} | {len(on)} |")
overhead = 100 * (np.median(ratios) - 1)
print(f"\nOverhead: {overhead:+.2f}% (median over the repetitions of on / off of the same repetition; "
      f"range {100 * (ratios.min() - 1):+.1f}% to {100 * (ratios.max() - 1):+.1f}%; goal <= 2%). "
      f"Run-to-run spread of the untraced runs alone: {100 * (off_medians.max() / off_medians.min() - 1):.0f}%.")
PYEOF
cat results/bench_trace_overhead.md
