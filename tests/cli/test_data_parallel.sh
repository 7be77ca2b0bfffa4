#!/usr/bin/env bash
# test_data_parallel.sh: data parallel x pipeline end to end (docs/data-parallel.md).
#   tests/cli/test_data_parallel.sh BUILD_DIR
# - Layout-free checkpoints: 6 steps at 4x1, and the same 6 steps resumed
#   across layouts 4x1 -> 2x2 -> 1x4 and back 1x4 -> 2x2 -> 4x1 (2 steps
#   each, dp_reduction = "ordered", the micro-batch size kept), end with
#   bitwise the same state (checkpoint digest). Replica 0 alone writes.
# - The printed loss is the global batch's: 2x1 and 1x2 print the same lines.
# - The replica reductions are under the watchdog: a replica that stops
#   before its reduction ends the job non-zero, and the waiting replica
#   names the bucket, the stage and the replica group.
# - A D > 1 run's start-up profile times its replicas' reduction (the plan line).
# - Bad grids stop before step 0 with their message.
source "$(dirname "$0")/lib.sh" "$1"

deck=inputs/mlp_small.toml
common=(--set pipeline.dp_reduction=\"ordered\" --set output.checkpoint_every=2
        --set output.log_every=1 --set training.steps=6)
layout() {  # layout P D: the --set arguments of a P x D grid, 4 global micro-batches
  echo "--set pipeline.data_parallel=$2 --set pipeline.micro_batches=$((4 / $2))"
}

run 4 train $deck "${common[@]}" $(layout 4 1) --set output.dir=\"$tmp/straight\"
check "4x1: 6 steps" status_is 0
cp "$tmp/out" "$tmp/straight.log"
want=$(digest 6 "$tmp/straight.log")
check "4x1: a final digest" has_digest 6 "$tmp/straight.log"

chain() {  # chain NAME P1 P2 P3: 2 steps on each layout, resumed from the last
  local name=$1 ckpt="$tmp/$1/checkpoints"; shift
  local steps=2 ok=1
  for p in "$@"; do
    local d=$((4 / p)) resume=()
    [ $steps -gt 2 ] && resume=(--resume)
    run 4 train $deck "${common[@]}" $(layout "$p" "$d") --set training.steps=$steps \
      --set output.dir=\"$tmp/$name\" --set output.checkpoint_dir=\"$ckpt\" "${resume[@]}"
    check "$name: ${p}x$d steps $((steps - 2))-$steps" status_is 0
    steps=$((steps + 2))
  done
  check "$name: bitwise the uninterrupted 4x1 state" [ "$(digest 6 "$tmp/out")" = "$want" ]
}
chain down 4 2 1
check "1x4: prints the grid" output_has "a grid of 1 pipeline ranks x 4 data-parallel replicas"
chain up 1 2 4

# The loss and the gradient norm are the global batch's: same lines at 2x1 and 1x2.
losses() { grep -o "loss [0-9.]* .*gnorm [0-9.e+-]*" "$tmp/out" | sed 's/ | lr [^|]*//'; }
run 2 train $deck --set training.steps=3 "${common[@]}" $(layout 2 1) --set output.dir=\"$tmp/l21\"
check "2x1 runs" status_is 0
a=$(losses)
run 2 train $deck --set training.steps=3 "${common[@]}" $(layout 1 2) --set output.dir=\"$tmp/l12\"
check "1x2 runs" status_is 0
check "1x2: the start-up profile times the replicas' reduction" output_has "data-parallel reductions at D = 2:"
check "2x1 and 1x2 print the same losses and norms" [ -n "$a" ] && [ "$a" = "$(losses)" ]

# Watchdog: replica 1 (world rank 1 of a 1x2 grid) stops as its first
# bucket is due; replica 0 names the reduction it waits for.
PIPETRAIN_TEST_STALL=1:reduction:1 run 2 train $deck $(layout 1 2) \
  --set pipeline.timeout_s=2 --set output.dir=\"$tmp/stall\"
check "stall: the job ends non-zero (no hang)" status_not
check "stall: the stopped rank stopped at the reduction" output_has "test fault: stopping at"
check "stall: the waiting replica names the bucket and the group" output_has \
  "in step 1 waiting for the data-parallel gradient reduction of bucket 0 of stage 0"
check "stall: ... and the replica group" output_has "across its 2 replicas (world ranks 0, 1)"
check "stall: no process left" no_leftovers
# At 2x2 the stopped rank's pipeline neighbour and its replica both wait.
PIPETRAIN_TEST_STALL=3:reduction:0 run 4 train $deck $(layout 2 2) \
  --set pipeline.timeout_s=2 --set output.dir=\"$tmp/stall4\"
check "stall 2x2: the job ends non-zero" status_not
check "stall 2x2: a waiting rank says it timed out" output_has "timed out after 2 s"
check "stall 2x2: no process left" no_leftovers

# Bad grids.
run 4 train $deck --set pipeline.data_parallel=3 --set output.dir=\"$tmp/bad\"
check "data_parallel not dividing the ranks: exit 2" status_is 2
check "... names the key" output_has "pipeline.data_parallel = 3 but the job has 4 MPI ranks"
run 4 train $deck --set pipeline.data_parallel=4 --set pipeline.micro_batches=8 --set output.dir=\"$tmp/bad\"
check "batch not divisible by D x N: exit 2" status_is 2
check "... says so" output_has "the global batch must be divisible by data_parallel x micro_batches = 4 x 8"
run 2 train $deck --set pipeline.data_parallel=2 --set pipeline.micro_batches=2 \
  --set pipeline.schedule=\"zb-h1\" --set pipeline.dp_reduction=\"ordered\" --set output.dir=\"$tmp/bad\"
check "ordered with a split backward: exit 2" status_is 2
check "... says why" output_has "splits the backward (W actions)"
run 2 train $deck --set pipeline.dp_reduction=\"sum\" --set output.dir=\"$tmp/bad\"
check "unknown dp_reduction: exit 2" status_is 2
check "... lists the choices" output_has "pipeline.dp_reduction"
# pipeline.stages with more ranks: the default D is ranks / stages.
run 4 validate $deck --set pipeline.stages=2
check "stages = 2 on 4 ranks validates as 2 x 2" output_has "2 pipeline ranks x 2 data-parallel replicas"

echo "test_data_parallel: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
