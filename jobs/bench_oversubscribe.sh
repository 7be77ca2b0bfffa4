#!/usr/bin/env bash
# bench_oversubscribe.sh: what idle ranks cost the busy ones when a node has
# more ranks than cores (make run: 4 ranks on 2 cores), for each wait mode,
# and what the sleep backoff costs when every rank has its own core.
#   jobs/bench_oversubscribe.sh            (REPEATS=3 STEPS=150)
# Runs the default job's deck at NP=4 (oversubscribed here) and NP=2 (one
# core per rank), with PIPETRAIN_WAIT=yield and =sleep alternately, REPEATS
# times each; reports the wall time of the training loop and the median step
# time (first 5 steps dropped). Writes results/bench_oversubscribe.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
DECK=${DECK:-inputs/gpt_markov.toml}
REPEATS=${REPEATS:-3}
STEPS=${STEPS:-150}
PY=tools/.venv/bin/python
mkdir -p runs results
for r in $(seq "$REPEATS"); do
  for np in 4 2; do
    for mode in yield sleep; do
      dir=runs/bench_oversub_${np}_${mode}_$r
      PIPETRAIN_WAIT=$mode timeout 600 mpirun --oversubscribe --bind-to none -np "$np" \
        build/pipetrain train "$DECK" --set training.steps="$STEPS" --set training.eval_every=0 \
        --set output.dir=\"$dir\" > "$dir.log" 2>&1 || { cat "$dir.log"; exit 1; }
    done
  done
done
blas=$(grep -m1 '^BLAS (rank' runs/bench_oversub_2_yield_1.log || echo "BLAS: unknown")
$PY - "$REPEATS" "$DECK" "$STEPS" "$blas" > results/bench_oversubscribe.md <<'PYEOF'
import sys, re, h5py, numpy as np, datetime, os
repeats, deck, steps, blas = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
def run(np_ranks, mode, r):
    d = f"runs/bench_oversub_{np_ranks}_{mode}_{r}"
    with h5py.File(f"{d}/metrics.h5") as f:
        t = np.asarray(f["step_time_s"])
    wall = float(re.search(r"done: \d+ steps in ([0-9.]+) s", open(d + ".log").read()).group(1))
    return wall, float(np.median(t[5:]))
print("# Waits on an oversubscribed node\n")
print(f"Command: `jobs/bench_oversubscribe.sh` (deck `{deck}`, {steps} steps, "
      f"{repeats} alternating runs of each mode; step times without the first 5). "
      f"{os.cpu_count()} cores, {datetime.date.today()}.\n\n{blas}\n")
print("| ranks | cores | waits | training loop s (median, min-max) | median step ms |")
print("|---:|---:|---|---|---:|")
for np_ranks in (4, 2):
    for mode in ("yield", "sleep"):
        rows = [run(np_ranks, mode, r) for r in range(1, repeats + 1)]
        walls = sorted(w for w, _ in rows)
        steps_ms = 1e3 * float(np.median([s for _, s in rows]))
        print(f"| {np_ranks} | {os.cpu_count()} | {mode} | {np.median(walls):.2f} "
              f"({walls[0]:.2f}-{walls[-1]:.2f}) | {steps_ms:.1f} |")
print("\nThe default is `yield` at every rank count; `PIPETRAIN_WAIT=sleep` selects the other mode.")
PYEOF
cat results/bench_oversubscribe.md
