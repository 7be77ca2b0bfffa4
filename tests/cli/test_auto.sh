#!/usr/bin/env bash
# test_auto.sh: pipeline.auto end to end on 2 ranks (docs/planner.md): the
# run takes a plan within the budget and prints it with its runners-up;
# deck.resolved.toml holds the choice, and training that resolved deck
# without auto gives bitwise the same history; keys the deck sets are kept;
# a resume keeps the first run's choice; `plan` names the choice a run
# takes; auto chooses the P x D grid when the deck leaves it (and keeps a
# D the deck sets); a budget nothing fits names the smallest feasible one;
# what auto cannot keep is refused by name.
#   tests/cli/test_auto.sh BUILD_DIR
source "$(dirname "$0")/lib.sh" "$1"
need_tools_python
deck=inputs/mlp_auto.toml

run 2 train $deck --set output.dir=\"$tmp/a\"
check "a run with pipeline.auto trains" status_is 0
check "it prints its choice" output_has "auto: chose "
check "the run's plan takes auto's profile, not a second one" output_has "plan: brief profile of every unit in 0.00 s, pipeline.auto's at this micro-batch size"
check "... and where the deck as written ranks" output_has "auto: the deck as written (1f1b, N=4, recompute none, partition uniform) ranks "
chosen=$(sed -n 's/^auto: chose \(.*\): predicted.*/\1/p' "$tmp/out")
check "deck.resolved.toml holds the choice as explicit values ($chosen)" bash -c "
  grep -qE '^auto = false' '$tmp/a/deck.resolved.toml' &&
  grep -qE '^partition = \[[0-9]+(, [0-9]+)*\]' '$tmp/a/deck.resolved.toml' &&
  n=\$(sed -n 's/^micro_batches = \([0-9]*\).*/\1/p' '$tmp/a/deck.resolved.toml') &&
  case '$chosen' in *\" N=\$n \"*) true ;; *) false ;; esac"
check "metrics.h5 records the choice" "$py" -c "
import h5py, sys
with h5py.File('$tmp/a/metrics.h5') as f:
    a = f.attrs['auto_choice']
    a = a.decode() if isinstance(a, bytes) else a
    sys.exit(0 if a == '''$chosen''' and f.attrs['auto_predicted_step_s'] > 0 else 1)"

run 2 train "$tmp/a/deck.resolved.toml" --set output.dir=\"$tmp/b\"
check "the resolved deck runs without auto" bash -c "[ $status -eq 0 ] && ! grep -q '^auto: ' '$tmp/out'"
check "... bitwise the same history" same_history "$tmp/b" "$tmp/a"

run 2 train $deck --set pipeline.micro_batches=8 --set pipeline.schedule=\"gpipe\" --set output.dir=\"$tmp/c\"
check "explicit keys are kept (gpipe, N = 8)" output_has "auto: chose gpipe N=8 "

run 2 train $deck --set output.checkpoint_every=2 --set training.steps=4 --set output.dir=\"$tmp/r\"
first=$(sed -n 's/^auto: chose \(.*\): predicted.*/\1/p' "$tmp/out")
run 2 train $deck --set output.checkpoint_every=2 --set training.steps=6 --set output.dir=\"$tmp/r\" --resume latest
check "a resume keeps the first run's choice" output_has "auto: resuming: keeps the choice in $tmp/r/deck.resolved.toml: "
check "... without profiling again" bash -c "! grep -q '^auto: chose' '$tmp/out' && [ $status -eq 0 ]"

run 2 plan $deck
best_rank=$(sed -n 's/^best: rank \([0-9]*\),.*/\1/p' "$tmp/out")
check "plan names the choice a run of the deck takes: its best, rank ${best_rank:-?}" \
  bash -c "[ -n '$best_rank' ] && grep -qF 'pipeline.auto: a run of this deck chooses rank $best_rank, ' '$tmp/out'"

# The grid: one unit cannot make two stages, so auto must take P x D = 1 x 2.
run 2 train $deck --set model.depth=1 --set output.dir=\"$tmp/g\"
check "auto chooses the grid (one unit on 2 ranks: 1 x 2)" output_has "auto: grid P x D = 1 x 2 of the 2 ranks"
check "... the resolved deck holds D = 2" grep -q '^replicas = 2 ' "$tmp/g/deck.resolved.toml"
check "... and the run trained on it" output_has "a grid of 1 pipeline ranks x 2 data-parallel replicas"
check "... profiled again on its own pipeline" bash -c "! grep -q \"pipeline.auto's at this micro-batch size\" '$tmp/out'"
run 2 train "$tmp/g/deck.resolved.toml" --set output.dir=\"$tmp/h\"
check "... which repeats it without auto, bitwise" same_history "$tmp/h" "$tmp/g"
run 2 plan $deck --set model.depth=1
check "plan names the same grid" output_has "2 data-parallel replicas (on its own profiles)"
run 2 train $deck --set model.depth=1 --set data_parallel.replicas=1 --set output.dir=\"$tmp/i\"
check "a D the deck sets is kept (1 x 1 unit on 2 stages is refused)" output_has "model.depth = 1: must be >= the number of stages (2"

run 2 train $deck --set pipeline.memory_budget_mb=0.001 --set output.dir=\"$tmp/d\"
check "a budget nothing fits stops the run" status_not
check "... naming the smallest feasible budget" output_has "the smallest feasible budget is "
check "... and the budget's key" output_has "pipeline.memory_budget_mb = 0.001"

run 2 train $deck --set 'pipeline.recompute_stages=["none","full"]' --set output.dir=\"$tmp/e\"
check "per-stage recompute policies are refused with auto" output_has "pipeline.recompute_stages: pipeline.auto chooses one recompute policy for every stage"
run 2 train $deck --set pipeline.recompute=\"auto\" --set pipeline.memory_budget_mb=100 --set output.dir=\"$tmp/f\"
check "recompute = auto is refused with auto" output_has "pipeline.recompute = \"auto\": pipeline.auto chooses the recompute policy itself"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
