#!/usr/bin/env bash
# bench_message_check.sh: what the checks of issue #44 cost (docs/reliability.md):
#  - pipeline.check_messages (an envelope and two payload checksums per
#    inter-stage message, an inf/NaN count of every stage output) on a
#    P = NP pipeline: step time off vs on;
#  - data_parallel.check_every = 1 (the replicas' parameter digests compared
#    after every step; the default is every 100 steps) on NP data-parallel
#    replicas of one stage: step time 0 (off) vs 1.
# Each pair runs side by side REPEATS times, the order flipped every
# repetition; the cost is the median over repetitions of on / off (steps
# after 2 warm-up). Writes results/bench_message_check.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
DECK=${DECK:-inputs/bench_gpt_scaling.toml}
NP=${NP:-2}
REPEATS=${REPEATS:-5}
STEPS=${STEPS:-12}
PY=tools/.venv/bin/python
mkdir -p runs results

# run NAME SETTINGS...: one training run into runs/bench_msgcheck_NAME.
run() {
  local name=$1; shift
  local dir=runs/bench_msgcheck_$name
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  mpirun --oversubscribe --bind-to none -np "$NP" build/pipetrain train "$DECK" "${sets[@]}" \
    --set training.steps=$STEPS --set output.dir=\"$dir\" > "$dir.log" 2>&1 || { cat "$dir.log"; exit 1; }
}

for r in $(seq "$REPEATS"); do
  order="false true"; [ $((r % 2)) = 0 ] && order="true false"
  for on in $order; do
    run "msg_${on}_$r" pipeline.check_messages=$on
    every=0; [ "$on" = true ] && every=1
    run "rep_${on}_$r" pipeline.stages=1 data_parallel.replicas=$NP data_parallel.check_every=$every
  done
done

$PY - "$REPEATS" "$DECK" "$NP" "$STEPS" \
  "$($PY tools/run_identity.py runs/bench_msgcheck_msg_false_1/metrics.h5)" \
  > results/bench_message_check.md <<'PYEOF'
import sys, h5py, numpy as np
repeats, deck, np_ranks, steps, identity = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
reps = range(1, repeats + 1)
def times(kind, flag, r):
    with h5py.File(f"runs/bench_msgcheck_{kind}_{flag}_{r}/metrics.h5") as f:
        return np.asarray(f["step_time_s"])[2:]
print("# The cost of the inter-stage message check and the replica check (#44)\n")
print(f"Command: `jobs/bench_message_check.sh` (deck `{deck}`, {np_ranks} ranks, {steps} steps, "
      f"first 2 dropped, {repeats} repetitions of each pair, the order flipped every repetition).\n")
print(f"{identity}\n")
print("| check | layout | median step off (ms) | median step on (ms) | cost: median of on/off per repetition | range |")
print("|---|---|---:|---:|---:|---|")
rows = [("msg", "`pipeline.check_messages = true`", f"P = {np_ranks} stages, 1F1B"),
        ("rep", "`data_parallel.check_every = 1`", f"D = {np_ranks} replicas of 1 stage")]
for kind, what, layout in rows:
    off = np.concatenate([times(kind, "false", r) for r in reps])
    on = np.concatenate([times(kind, "true", r) for r in reps])
    ratios = np.array([np.median(times(kind, "true", r)) / np.median(times(kind, "false", r)) for r in reps])
    print(f"| {what} | {layout} | {1e3 * np.median(off):.2f} | {1e3 * np.median(on):.2f} | "
          f"{100 * (np.median(ratios) - 1):+.2f}% | {100 * (ratios.min() - 1):+.1f}% to {100 * (ratios.max() - 1):+.1f}% |")
PYEOF
cat results/bench_message_check.md
