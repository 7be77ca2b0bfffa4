#!/usr/bin/env bash
# test_stall.sh: no wait of a run is unbounded (docs/reliability.md).
#   tests/cli/test_stall.sh BUILD_DIR [SEED]
# A rank that stops (SIGSTOP, through PIPETRAIN_TEST_STALL=RANK:POINT[:STEP]
# or `kill -STOP` from outside at a random moment) must end the whole job
# with a non-zero status within the timeout, and a rank that waited prints
# one line naming the phase of the run and what it waited for; rank 0 names
# the ranks that did not arrive. Every case runs under `timeout` (a hang is
# exit 124, a failure) and leaves no pipetrain process of its own behind
# (found by the job marker of lib.sh; another job's rank, stopped at
# start-up, runs beside the test and must be left alone). The stall
# points cover every kind of wait: start-up, the executor's exchanges, the
# loss broadcast, the gradient-norm, bubble and memory collectives,
# evaluation, the checkpoint write and load agreements, the trace gather,
# the transfers of a rebalancing move.
source "$(dirname "$0")/lib.sh" "$1"
seed=${2:-$(date +%s)}
RANDOM=$seed
echo "seed $seed (rerun: $0 $1 $seed)"

deck=inputs/mlp_small.toml
limit=(--set pipeline.timeout_s=2)
timed_out_line() { grep -Eq "pipetrain: rank [0-9]+: error: .*timed out after [0-9.]+ s" "$tmp/out"; }

stall_case() {  # stall_case NAME NP SPEC EXPECTED-TEXT ARGS...
  local name=$1 np=$2 spec=$3 expected=$4; shift 4
  PIPETRAIN_TEST_STALL=$spec run "$np" train $deck "${limit[@]}" "$@" \
    --set output.dir=\"$tmp/$name\"
  check "$name: the job ends non-zero (no hang)" status_not
  check "$name: the stalled rank stopped where asked" output_has "test fault: stopping at"
  check "$name: a waiting rank says it timed out" timed_out_line
  check "$name: the message names the wait" output_has "$expected"
  check "$name: no process left" no_leftovers
}

# Another job's pipetrain rank runs beside this test the whole time: every
# "no process left" check must ignore it, and nothing here may kill it.
check "decoy: another job's pipetrain rank is running beside the test" start_decoy
trap 'stop_decoy; rm -rf "$tmp"' EXIT

# A checkpoint to resume from (for the load-agreement case).
run 2 train $deck --set training.steps=4 --set output.checkpoint_every=2 \
  --set output.dir=\"$tmp/base\"
check "checkpointed run" status_is 0

# Rank 1 stops at each point; rank 0 names it. Steps are drawn at random.
step=$((RANDOM % 4))
stall_case startup 2 "1:startup" "at start-up waiting for the deck broadcast from rank 0 (rank 1 did not arrive)"
stall_case executor 2 "1:step:$step" "waiting on 0RECV_B"
stall_case loss 2 "1:loss:$step" "in step $step waiting for the loss broadcast from the last stage (rank 1 did not arrive)"
stall_case grad_norm 4 "1:grad_norm:$step" "in step $step waiting for the gradient-norm counts all-gather (rank 1 did not arrive)"
stall_case bubble 4 "3:bubble:$step" "in step $step waiting for the measured-bubble all-gather (rank 3 did not arrive)"
stall_case memory 2 "1:memory:$step" "in step $step waiting for the per-stage memory peaks gather (rank 1 did not arrive)"
stall_case eval 2 "1:eval" "in the evaluation after step 1 waiting" --set training.eval_every=2
stall_case checkpoint 2 "1:checkpoint:2" "in the checkpoint save after step 1 waiting" \
  --set output.checkpoint_every=2
check "checkpoint: latest still names no half-written checkpoint" \
  test ! -e "$tmp/checkpoint/checkpoints/latest"
stall_case resume 2 "1:resume" "while loading the checkpoint" \
  --set output.checkpoint_dir=\"$tmp/base/checkpoints\" --set training.steps=8 --resume
stall_case trace 2 "1:trace" "in the trace gather at the end of the run" --set output.trace=true
# Rank 1 stops as a move begins (forced by PIPETRAIN_TEST_REBALANCE): rank 0
# waits for the units rank 1 was to send, and the message names the move.
PIPETRAIN_TEST_REBALANCE=$step:7,1 stall_case rebalance 2 "1:rebalance:$step" \
  "in the rebalancing move after step $step (partition [4, 4] -> [7, 1]) waiting for the rebalancing receive of unit4.linear.weight/value from rank 1"

# Rank 0 stops: the others still end the job, naming what they wait for.
stall_case root_loss 4 "0:loss:$step" "in step $step waiting for the"

# kill -STOP from outside, at a random moment of a long run, on a random rank.
np=4
victim=$((RANDOM % np))
delay=$((2 + RANDOM % 3))
timeout 60 mpirun --oversubscribe --bind-to none -np $np "$build/pipetrain" train $deck \
  --set training.steps=100000000 --set output.log_every=1000 "${limit[@]}" \
  --set output.dir=\"$tmp/killstop\" > "$tmp/out" 2>&1 &
job=$!
sleep "$delay"
pid=""
for p in $(job_pids); do
  if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$victim"; then pid=$p; fi
done
check "kill -STOP: found rank $victim" test -n "$pid"
[ -n "$pid" ] && kill -STOP "$pid"
wait "$job"
status=$?
echo "kill -STOP rank $victim after ${delay}s: exit $status"
check "kill -STOP: the job ends non-zero (no hang)" status_not
check "kill -STOP: a waiting rank says it timed out" timed_out_line
check "kill -STOP: no process left" no_leftovers

check "decoy: the other job's rank is untouched" decoy_alive
stop_decoy

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
