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
  for trace in false true; do
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
def times(flag):
    t = []
    for r in range(1, repeats + 1):
        with h5py.File(f"runs/bench_trace_{flag}_{r}/metrics.h5") as f:
            t.extend(np.asarray(f["step_time_s"])[2:])
    return np.asarray(t)
off, on = times("false"), times("true")
print("# Tracing overhead\n")
print(f"Command: `jobs/bench_trace_overhead.sh` (deck `{deck}`, {np_ranks} ranks, 12 steps, "
      f"first 2 dropped, {repeats} alternating runs each).\n\n{sys.argv[4]}\n")
print("| tracing | median step time (ms) | steps timed |")
print("|---|---:|---:|")
print(f"| off | {1e3 * np.median(off):.2f} | {len(off)} |")
print(f"| on | {1e3 * np.median(on):.2f} | {len(on)} |")
overhead = 100 * (np.median(on) / np.median(off) - 1)
print(f"\nOverhead: {overhead:+.2f}% (goal <= 2%).")
PYEOF
cat results/bench_trace_overhead.md
