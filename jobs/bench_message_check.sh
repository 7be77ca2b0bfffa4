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
# after 2 warm-up). On a shared machine the step times vary by more than the
# checks cost, so the checks' own work is also measured in CPU time
# (build/bench_digest: the digest of one message and of one rank's
# parameters, sizes from the deck and the run) and set against the step.
# Writes results/bench_message_check.md. Needs build/pipetrain and build/bench_digest.
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

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq "$REPEATS"); do
  order="false true"; [ $((r % 2)) = 0 ] && order="true false"
  for on in $order; do
    run "msg_${on}_$r" pipeline.check_messages=$on
    every=0; [ "$on" = true ] && every=1
    run "rep_${on}_$r" pipeline.stages=1 data_parallel.replicas=$NP data_parallel.check_every=$every
  done
done

LOAD="load average (1, 5, 15 min) $LOAD_BEFORE before the runs, $(cut -d' ' -f1-3 /proc/loadavg) after, on $(nproc) cores"
$PY - "$REPEATS" "$DECK" "$NP" "$STEPS" "$LOAD" \
  "$($PY tools/run_identity.py runs/bench_msgcheck_msg_false_1/metrics.h5)" \
  > results/bench_message_check.md <<'PYEOF'
import sys, h5py, numpy as np, subprocess, tomllib
repeats, deck, np_ranks, steps, load, identity = (int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4],
                                                   sys.argv[5], sys.argv[6])
reps = range(1, repeats + 1)
def times(kind, flag, r):
    with h5py.File(f"runs/bench_msgcheck_{kind}_{flag}_{r}/metrics.h5") as f:
        return np.asarray(f["step_time_s"])[2:]
# The step over its busiest stage's compute (F + B + W, no waits and no
# checks): the cores' speed, which other work on them changes from run to
# run, cancels out of it, while the checks' work (outside F, B and W) stays.
def step_over_compute(kind, flag, r):
    with h5py.File(f"runs/bench_msgcheck_{kind}_{flag}_{r}/metrics.h5") as f:
        steps = np.asarray(f["step_time_s"])[2:]
        compute = np.asarray(f["stage_compute_s"])[2:].max(axis=1)
    return np.median(steps / compute)
print("# The cost of the inter-stage message check and the replica check (#44)\n")
print(f"Command: `jobs/bench_message_check.sh` (deck `{deck}`, {np_ranks} ranks, {steps} steps, "
      f"first 2 dropped, {repeats} repetitions of each pair, the order flipped every repetition).\n")
print(f"{identity}\n\nMachine load from other work: {load}.\n")
print("| check | layout | median step off (ms) | median step on (ms) | step on/off: median over repetitions (range) | step/compute on over off: median (range) |")
print("|---|---|---:|---:|---:|---:|")
rows = [("msg", "`pipeline.check_messages = true`", f"P = {np_ranks} stages, 1F1B"),
        ("rep", "`data_parallel.check_every = 1`", f"D = {np_ranks} replicas of 1 stage")]
for kind, what, layout in rows:
    off = np.concatenate([times(kind, "false", r) for r in reps])
    on = np.concatenate([times(kind, "true", r) for r in reps])
    ratios = np.array([np.median(times(kind, "true", r)) / np.median(times(kind, "false", r)) for r in reps])
    norm = np.array([step_over_compute(kind, "true", r) / step_over_compute(kind, "false", r) for r in reps])
    print(f"| {what} | {layout} | {1e3 * np.median(off):.2f} | {1e3 * np.median(on):.2f} | "
          f"{100 * (np.median(ratios) - 1):+.2f}% ({100 * (ratios.min() - 1):+.1f}% to {100 * (ratios.max() - 1):+.1f}%) | "
          f"{100 * (np.median(norm) - 1):+.2f}% ({100 * (norm.min() - 1):+.1f}% to {100 * (norm.max() - 1):+.1f}%) |")

# The checks' own work, in CPU time. One message: a micro-batch's activation
# (rows x seq_len x d_model fp32, the same bytes as its gradient); each rank
# digests every message it sends and every one it receives. The replica
# check digests the rank's parameters once.
with open(deck, "rb") as f:
    d = tomllib.load(f)
m, t, p = d["model"], d["training"], d["pipeline"]
rows = t["batch_size"] // p["micro_batches"]
message = rows * m["seq_len"] * m["d_model"] * 4
with h5py.File("runs/bench_msgcheck_rep_false_1/metrics.h5") as f:
    params = int(np.asarray(f["peak_bytes_parameters"])[-1].max())
with h5py.File("runs/bench_msgcheck_msg_false_1/metrics.h5") as f:
    compute = np.median(np.asarray(f["stage_compute_s"])[2:].max(axis=1))
table = subprocess.run(["build/bench_digest", str(message), str(params)], check=True,
                       capture_output=True, text=True).stdout
us = [float(line.split("|")[2]) for line in table.splitlines()[2:]]
digests = 2 * p["micro_batches"]  # a middle rank: 2x; an end rank of P = 2 sends N and receives N
per_step = digests * us[0] * 1e-3
print(f"\nThe checks' own work, in this thread's CPU time (`build/bench_digest`, median of 21):\n")
print(table)
print(f"- Message check: {p['micro_batches']} micro-batches of {message} bytes; a rank of the 2-stage "
      f"pipeline digests {digests} messages per step (its N sends and N receives): "
      f"{per_step:.2f} ms per step, {100 * per_step * 1e-3 / compute:.2f}% of the median "
      f"busiest stage's compute time of the unchecked runs here ({1e3 * compute:.0f} ms, itself "
      f"inflated by the shared cores).")
print(f"- Replica check: {params} bytes of parameters per rank: {us[1] * 1e-3:.2f} ms per check plus "
      f"an all-gather of 8 bytes per parameter; every step that is "
      f"{100 * us[1] * 1e-6 / compute:.2f}% of the step, at the default interval "
      f"(100 steps) {us[1] * 1e-6 / compute / 100:.4%}.")
print("\nReading: the step times of one configuration vary between runs by tens of percent on "
      "shared cores, far more than the checks cost, so the raw on/off ratio says little; the "
      "step over its compute time cancels the cores' speed and leaves the work outside F, B "
      "and W, where the checks run; the CPU-time figures bound that work directly. On a GPU "
      "the digest runs on the device, but each one waits for its payload's producer "
      "(one synchronisation per message), and receives are waited for on the host: not "
      "measured here (no GPU on this machine).")
PYEOF
cat results/bench_message_check.md
