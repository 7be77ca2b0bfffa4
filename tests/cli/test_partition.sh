#!/usr/bin/env bash
# test_partition.sh: named partition strategies in a run (docs/planner.md):
# the brief start-up profile turns "time" / "memory" / "balanced" into counts,
# the run prints and stores the choice and its predicted step beside the
# measured one, and impossible requests get their specific messages.
#   tests/cli/test_partition.sh BUILD_DIR
# inputs/mlp_wide_input.toml's first Linear layer (8192 -> 512) costs more
# than the other seven together, so at P = 2 every strategy must isolate it:
# [1, 7], whatever the machine's speed.
source "$(dirname "$0")/lib.sh" "$1"
py=tools/.venv/bin/python
deck=inputs/mlp_wide_input.toml
short=(--set training.steps=3 --set model.hidden_dim=256 --set data.samples=256)
attrs() {  # attrs DIR EXPR: EXPR over the metrics.h5 attributes a of DIR must hold
  "$py" -c "import h5py, sys; a = h5py.File('$1/metrics.h5').attrs; t = lambda k: a[k].decode() if isinstance(a[k], bytes) else str(a[k]); sys.exit(0 if ($2) else 1)"
}

for strategy in time memory balanced; do
  run 2 train $deck "${short[@]}" --set pipeline.partition=\"$strategy\" --set output.dir=\"$tmp/$strategy\"
  check "$strategy: run succeeds" status_is 0
  check "$strategy: the heavy first layer gets a stage of its own" \
    output_has "plan: partition $strategy: $strategy [1, 7]"
  check "$strategy: metrics.h5 stores the partition and the strategy" \
    attrs "$tmp/$strategy" "list(a['partition']) == [1, 7] and t('partition_strategy') == '$strategy'"
done
check "the step line carries the prediction and its error" bash -c "grep -Eq '^step .* ms \(plan [0-9.]+, [+-][0-9]+%\)' '$tmp/out'"
check "the run ends with the prediction against the measured median" \
  bash -c "grep -Eq '^plan: predicted step [0-9.]+ ms, measured median [0-9.]+ ms over [0-9]+ steps: error [+-][0-9.]+%; the steps. second half ran [0-9.]+% apart from the first' '$tmp/out'"
# The brief profile times its units in 3 passes and its stage chains in 3:
# a probe after each, between those before and after the profile.
check "the run ends with its speed probes and their spread" \
  bash -c "grep -Eq '^plan: speed probe \(a 512\^3 matmul, slowest rank\) [0-9.]+ ms before the profile, ([0-9.]+, ){5}[0-9.]+ ms after its passes, [0-9.]+ ms after it, [0-9.]+ ms after the steps: spread [0-9.]+%' '$tmp/out'"
check "metrics.h5 stores the nine probes and their spread" \
  attrs "$tmp/balanced" "len(a['speed_probe_s']) == 9 and min(a['speed_probe_s']) > 0 and abs(a['speed_probe_spread'] - (max(a['speed_probe_s']) / min(a['speed_probe_s']) - 1)) < 1e-12"
check "metrics.h5 stores the predicted step, bubble, stage times and peaks" \
  attrs "$tmp/balanced" "a['predicted_step_time_s'] > 0 and 0 <= a['predicted_bubble'] < 1 and len(a['predicted_stage_peak_bytes']) == 2 and len(a['predicted_stage_time_s']) == 2"

# Ranks that share cores (PIPETRAIN_NODE_CORES=1: 2 ranks on 1 core, on any
# machine): the prediction assumes a core per rank, so the run says so once
# and the step lines leave it out.
PIPETRAIN_NODE_CORES=1 run 2 train $deck "${short[@]}" --set pipeline.partition=\"time\" \
  --set output.dir=\"$tmp/shared_cores\"
check "shared cores: run succeeds" status_is 0
check "shared cores: one line says the prediction assumes a core per rank" \
  bash -c "[ \$(grep -c 'plan: 2 ranks share 1 core on this node; the planner.s step prediction ([0-9.]* ms) assumes a core per rank' '$tmp/out') = 1 ]"
check "shared cores: no step line compares with the prediction" bash -c "! grep -q '(plan ' '$tmp/out'"
check "shared cores: the end-of-run line says the ranks shared cores" \
  output_has "; ranks shared cores, which the prediction does not model"
PIPETRAIN_NODE_CORES=two run 2 train $deck "${short[@]}" --set output.dir=\"$tmp/bad_cores\"
check "PIPETRAIN_NODE_CORES not a number: non-zero exit" status_not
check "PIPETRAIN_NODE_CORES not a number: its message" \
  output_has 'PIPETRAIN_NODE_CORES = "two": expected a positive integer'

# A stage that runs late (pipeline.slowdown_*: rank 0's F and B take twice
# as long) still finishes its activation send before its B
# (sends_finished_before, docs/schedules.md), so its peak is the predicted one;
# without that wait the late stage 0 held the send's buffer through every B
# and peaked one message (1.3%) above the prediction.
run 2 train inputs/gpt_markov.toml --set training.steps=6 --set training.eval_every=0 \
  --set training.warmup_steps=1 --set pipeline.micro_batches=4 --set pipeline.recompute=\"full\" \
  --set pipeline.slowdown_rank=0 --set output.dir=\"$tmp/late\"
check "late stage: run succeeds" status_is 0
check "late stage: every stage's measured peak equals its predicted peak" \
  "$py" -c "import h5py, numpy as np, sys; f = h5py.File('$tmp/late/metrics.h5'); m = np.nanmax(np.asarray(f['peak_bytes_total'], float), axis=0); p = np.asarray(f.attrs['predicted_stage_peak_bytes'], float); print(p, m); sys.exit(0 if np.allclose(p, m, rtol=1e-3) else 1)"

# A convolutional stage 0 under recompute none: its blocks' B needs far more
# room than their F, and at stage 0's second F the stage also holds the
# first micro-batch's send and a gradient receive posted ahead. The
# simulator charges each phase its own transient (F's for F); with the
# larger of the two at every action it planned this stage one message
# above the run (2.35% on the cnn of the partition table).
run 2 train inputs/cnn.toml --set training.steps=4 --set training.eval_every=0 \
  --set training.warmup_steps=1 --set pipeline.micro_batches=2 --set pipeline.schedule=\"gpipe\" \
  --set pipeline.recompute=\"none\" --set output.dir=\"$tmp/cnn_none\"
check "cnn, recompute none: run succeeds" status_is 0
check "cnn, recompute none: every stage's measured peak equals its predicted peak" \
  "$py" -c "import h5py, numpy as np, sys; f = h5py.File('$tmp/cnn_none/metrics.h5'); m = np.nanmax(np.asarray(f['peak_bytes_total'], float), axis=0); p = np.asarray(f.attrs['predicted_stage_peak_bytes'], float); print(p, m); sys.exit(0 if np.allclose(p, m, rtol=1e-4) else 1)"

run 2 train $deck "${short[@]}" --set pipeline.partition="[6, 2]" --set output.dir=\"$tmp/explicit\"
check "an explicit list is kept and evaluated" output_has "plan: partition explicit: given [6, 2]"

run 2 train $deck "${short[@]}" --set pipeline.partition=\"uniform\" --set pipeline.predict=false \
  --set output.dir=\"$tmp/nopredict\"
check "pipeline.predict = false: no profile, no plan lines" bash -c "! grep -q '^plan:' '$tmp/out'"
check "... and the uniform counts are still recorded" attrs "$tmp/nopredict" "list(a['partition']) == [4, 4]"

run 2 train $deck "${short[@]}" --set pipeline.memory_budget_mb=1 --set output.dir=\"$tmp/tight\"
check "an infeasible budget exits non-zero" status_not
check "... naming the key, the budget and the smallest achievable peak" \
  bash -c "grep -Eq 'pipeline.memory_budget_mb.*memory budget 1048576 bytes \(1.00 MiB\) is below the smallest achievable largest stage peak [0-9]+ bytes' '$tmp/out'"

run 2 train $deck "${short[@]}" --set pipeline.memory_budget_mb=0 --set output.dir=\"$tmp/nobudget\"
check "balanced without a budget is refused at the deck check" \
  output_has 'pipeline.partition = "balanced": needs pipeline.memory_budget_mb'

echo "partition: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
