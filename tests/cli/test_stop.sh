#!/usr/bin/env bash
# test_stop.sh: a run asked to stop by a signal (a batch system's time-limit
# warning, SIGUSR1, or preemption, SIGTERM) finishes its step on every rank,
# writes a checkpoint, records why it stopped and exits with status 75; the
# resumed run ends bitwise equal to an uninterrupted one, with every step in
# metrics.h5 exactly once. --resume auto resumes when there is a checkpoint
# and starts at step 0 when there is none (docs/cluster.md).
#   tests/cli/test_stop.sh BUILD_DIR
# The signal reaches one rank only (PIPETRAIN_TEST_SIGNAL=<rank>:<step>[:<sig>]
# raises it there before that step, or kill from outside at a random moment):
# the others must stop after the same step. Every run is under `timeout`.
source "$(dirname "$0")/lib.sh" "$1"
need_tools_python

deck=inputs/mlp_small.toml
common=(--set training.steps=8 --set training.lr_schedule=\"cosine\" --set training.blas_threads=1
        --set output.checkpoint_every=5)
attr_is() {  # attr_is DIR NAME TEXT: metrics.h5 attribute NAME contains TEXT
  "$py" -c "import h5py, sys; v = h5py.File('$1/metrics.h5').attrs['$2']; v = v.decode() if isinstance(v, bytes) else str(v); sys.exit(0 if '$3' in v else 1)"
}

run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/straight\"
check "uninterrupted run succeeds" status_is 0
cp "$tmp/out" "$tmp/straight.log"

# SIGUSR1 on rank 1 before step 3: both ranks stop after step 4 of 8, with a
# checkpoint, though the deck writes the next one only after step 5.
PIPETRAIN_TEST_SIGNAL=1:3 run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/usr1\"
check "SIGUSR1: exit status 75" status_is 75
check "SIGUSR1: says why and where" \
  output_has "stopped: SIGUSR1 received; every rank stopped after step 4 of 8; checkpoint of step 4 in $tmp/usr1/checkpoints; exit status 75"
check "SIGUSR1: the checkpoint of step 4 is published" grep -qx step_00000004 "$tmp/usr1/checkpoints/latest"
check "SIGUSR1: no step after 4 ran" bash -c "! grep -q '^step      5/8' '$tmp/out'"
check "SIGUSR1: metrics.h5 records why" attr_is "$tmp/usr1" stop_reason "SIGUSR1 received; every rank stopped after step 4 of 8"
run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/usr1\" --resume auto
check "SIGUSR1: --resume auto resumes" output_has "resuming from $tmp/usr1/checkpoints/step_00000004 (step 4)"
check "SIGUSR1: the uninterrupted run has a final digest" has_digest 8 "$tmp/straight.log"
check "SIGUSR1: resumed run ends like the uninterrupted one" \
  [ "$(digest 8 "$tmp/out")" = "$(digest 8 "$tmp/straight.log")" ]
check "SIGUSR1: every step once in metrics.h5, bitwise" same_history "$tmp/usr1" "$tmp/straight"
check "SIGUSR1: the resumed run records that it trained to the end" \
  attr_is "$tmp/usr1" stop_reason "trained to the end: step 8 of 8"

# SIGTERM (preemption) on rank 0 before step 0: stops after the first step,
# whose checkpoint is due anyway (checkpoint_every = 1 here).
PIPETRAIN_TEST_SIGNAL=0:0:15 run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/term\" \
  --set output.checkpoint_every=1
check "SIGTERM: exit status 75" status_is 75
check "SIGTERM: stops after step 1, with the checkpoint it wrote anyway" \
  output_has "stopped: SIGTERM received; every rank stopped after step 1 of 8; checkpoint of step 1"
check "SIGTERM: one checkpoint line (not written twice)" \
  bash -c "[ \$(grep -c '^checkpoint step 1:' '$tmp/out') = 1 ]"
run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/term\" --set output.checkpoint_every=1 --resume auto
check "SIGTERM: resumed run ends like the uninterrupted one" \
  [ "$(digest 8 "$tmp/out")" = "$(digest 8 "$tmp/straight.log")" ]

# A signal during the last step changes nothing: the run ends normally.
PIPETRAIN_TEST_SIGNAL=1:7 run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/last\"
check "a signal in the last step: exit 0, trained to the end" status_is 0

# --resume auto with nothing to resume from: step 0, as if not asked.
run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/fresh\" --resume auto
check "--resume auto, no checkpoint: says so" output_has "--resume auto: no checkpoint in $tmp/fresh/checkpoints yet; starting at step 0"
check "--resume auto, no checkpoint: the uninterrupted run" \
  [ "$(digest 8 "$tmp/out")" = "$(digest 8 "$tmp/straight.log")" ]
# ... but a broken checkpoint is refused, not skipped to step 0.
mkdir -p "$tmp/broken/checkpoints/step_00000002"
run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/broken\" --resume auto
check "--resume auto, only a broken checkpoint: exit 2" status_is 2
check "--resume auto, only a broken checkpoint: names it" output_has "$tmp/broken/checkpoints"

# kill -USR1 from outside, at a random moment, on a random rank of 4: all
# stop after the same step (the run ends, checkpointed) and the resume ends
# like an uninterrupted run of the same length. The run lasts seconds; under
# ASan, where a step is several times slower, 1000 steps last as long (5000
# took about 60 s there, this script's limit per run).
long_steps=5000
sanitized_build && long_steps=1000
long=(--set training.steps=$long_steps --set training.blas_threads=1 --set output.log_every=250
      --set output.checkpoint_every=$long_steps)
run 4 train $deck "${long[@]}" --set output.dir=\"$tmp/long_straight\"
check "kill -USR1: the uninterrupted run of $long_steps steps" status_is 0
cp "$tmp/out" "$tmp/long_straight.log"
check "kill -USR1: ... has a final digest" has_digest $long_steps "$tmp/long_straight.log"
victim=$((RANDOM % 4))
timeout 60 mpirun --oversubscribe --bind-to none -np 4 "$build/pipetrain" train $deck "${long[@]}" \
  --set output.dir=\"$tmp/long\" > "$tmp/out" 2>&1 &
launcher=$!
for i in $(seq 1 100); do grep -q '^step ' "$tmp/out" 2> /dev/null && break; sleep 0.1; done
pid=""
for p in $(job_pids); do
  tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$victim" && pid=$p
done
check "kill -USR1: found rank $victim" test -n "$pid"
[ -n "$pid" ] && kill -USR1 "$pid"
wait "$launcher"
status=$?
stopped=$(grep -o 'every rank stopped after step [0-9]*' "$tmp/out" | awk '{print $NF}')
echo "kill -USR1 rank $victim: exit $status, stopped after step ${stopped:-?}"
check "kill -USR1: exit status 75 (the run was still training)" status_is 75
check "kill -USR1: the checkpoint of the step all stopped after" \
  grep -qx "step_$(printf %08d "${stopped:-0}")" "$tmp/long/checkpoints/latest"
run 4 train $deck "${long[@]}" --set output.dir=\"$tmp/long\" --resume auto
check "kill -USR1: resumed run ends like the uninterrupted one" \
  [ "$(digest $long_steps "$tmp/out")" = "$(digest $long_steps "$tmp/long_straight.log")" ]
# A storm of signals on every rank of a GPT run (one every 20 ms for 2 s,
# USR1 and TERM mixed): they arrive inside GEMMs, MPI waits and the
# checkpoint write; the run still stops once, cleanly, with its checkpoint
# (a handler run inside a GEMM once corrupted the heap: stop_signal.hpp).
gpt=(--set training.steps=400 --set training.eval_every=0 --set output.log_every=50 --set training.blas_threads=1)
timeout 60 mpirun --oversubscribe --bind-to none -np 2 "$build/pipetrain" train inputs/gpt_markov.toml \
  "${gpt[@]}" --set output.dir=\"$tmp/storm\" > "$tmp/out" 2>&1 &
launcher=$!
wait_for_step() { for i in $(seq 1 150); do grep -q '^step ' "$tmp/out" 2> /dev/null && return 0; sleep 0.1; done; return 1; }
wait_for_step
for i in $(seq 1 100); do
  sig=USR1; [ $((i % 3)) = 0 ] && sig=TERM
  for p in $(job_pids); do
    [ "$(basename "$(readlink "/proc/$p/exe" 2> /dev/null)")" = pipetrain ] && kill -s $sig "$p" 2> /dev/null
  done
  sleep 0.02
done
wait "$launcher"
status=$?
check "signal storm: exit status 75" status_is 75
check "signal storm: stopped once" bash -c "[ \$(grep -c '^stopped:' '$tmp/out') = 1 ]"
check "signal storm: no crash" bash -c "! grep -Eq 'corrupted|double free|Process received signal|Aborted' '$tmp/out'"
check "signal storm: its checkpoint is published" test -s "$tmp/storm/checkpoints/latest"

check "no process left" no_leftovers

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
