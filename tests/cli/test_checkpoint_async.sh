#!/usr/bin/env bash
# test_checkpoint_async.sh: asynchronous checkpoints (output.checkpoint_async)
# end to end under mpirun.
#   tests/cli/test_checkpoint_async.sh BUILD_DIR
# An asynchronous run saves bitwise what a synchronous one saves (the same
# digests), its trace shows each host copy (CKPT_STAGE) and the waits
# (CKPT_WAIT), and metrics.h5 counts the host copy (checkpoint_staging). A rank killed at each phase of the background write
# (PIPETRAIN_TEST_ASYNC_SAVE_FAULT=RANK:STEP:PHASE: staged, written, fsynced
# on rank 1; bound and published on rank 0, whose phases they are) leaves `latest` on the previous checkpoint (or, once
# published, on this one), and --resume continues bit for bit with a complete
# metrics.h5. A failed write ends the run naming the file, on every rank; a
# stop signal publishes the save in flight and its own before exit 75.
source "$(dirname "$0")/lib.sh" "$1"
need_tools_python
losses() { grep -o '^step *[0-9]*/[0-9]* | loss [0-9.]*' "$1" | sed 's/  */ /g'; }
same_losses_from() {  # same_losses_from STEP FILE_A FILE_B: step lines >= STEP agree
  diff <(losses "$2" | awk -v s="$1" '{split($2, a, "/"); if (a[1] >= s) print}') \
       <(losses "$3" | awk -v s="$1" '{split($2, a, "/"); if (a[1] >= s) print}')
}
latest_is() { grep -qx "step_0000000$2" "$tmp/$1/checkpoints/latest"; }

deck=inputs/mlp_small.toml
common=(--set training.steps=8 --set output.checkpoint_every=2)
async=(--set output.checkpoint_async=true)

run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/sync\"
cp "$tmp/out" "$tmp/sync.log"
check "synchronous run succeeds" status_is 0

run 2 train $deck "${common[@]}" "${async[@]}" --set output.trace=true --set output.dir=\"$tmp/async\"
cp "$tmp/out" "$tmp/async.log"
check "asynchronous run succeeds" status_is 0
for s in 2 4 6 8; do
  check "asynchronous checkpoint $s is bitwise the synchronous one" \
    [ "$(digest $s "$tmp/async.log")" = "$(digest $s "$tmp/sync.log")" ]
done
check "the line says how long training was blocked" output_has "; asynchronous: training blocked "
check "the same losses as with synchronous saves" same_losses_from 0 "$tmp/sync.log" "$tmp/async.log"
check "latest names the last checkpoint" latest_is async 8
trace_counts() {
  "$py" - "$tmp/async/trace.h5" > "$tmp/py.out" 2>&1 <<'PY'
import sys
sys.path.insert(0, "tools")
import numpy as np
from trace_lib import load_trace
t = load_trace(sys.argv[1])
for r, ev in enumerate(t.events):
    stage = int(np.sum(ev["kind"] == t.code("CKPT_STAGE")))
    wait = int(np.sum(ev["kind"] == t.code("CKPT_WAIT")))
    assert stage == 4, f"rank {r}: {stage} CKPT_STAGE events, not 4 (one per save)"
    assert wait >= 1, f"rank {r}: no CKPT_WAIT event (the final save waits)"
PY
}
check "the trace holds each host copy and the final wait" trace_counts
staging_rows() {
  "$py" - "$tmp/async/metrics.h5" "$tmp/sync/metrics.h5" > "$tmp/py.out" 2>&1 <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1]) as a, h5py.File(sys.argv[2]) as s:
    staged = a["peak_bytes_checkpoint_staging"][:]
    assert np.all(staged[:2] == 0) and np.all(staged[2:] > 0), f"async staging bytes {staged}"
    assert np.all(s["peak_bytes_checkpoint_staging"][:] == 0), "sync saves stage nothing"
PY
}
check "metrics.h5 counts the host copy from the first save on" staging_rows

# A kill at each phase of the background write of the step-4 checkpoint.
for fault in 1:staged 1:written 1:fsynced 0:bound 0:published; do
  rank=${fault%%:*} phase=${fault#*:} dir=kill_${rank}_$phase
  expect=2; [ "$phase" = published ] && expect=4
  PIPETRAIN_TEST_ASYNC_SAVE_FAULT=$rank:4:$phase run 2 train $deck "${common[@]}" "${async[@]}" \
    --set output.dir=\"$tmp/$dir\"
  check "$phase (rank $rank): the kill ends the job" status_not
  check "$phase (rank $rank): killed at that phase" output_has "killed at phase '$phase'"
  check "$phase (rank $rank): latest names step $expect" latest_is $dir $expect
  run 2 train $deck "${common[@]}" "${async[@]}" --set output.dir=\"$tmp/$dir\" --resume
  check "$phase (rank $rank): resumes from step $expect" \
    output_has "resuming from $tmp/$dir/checkpoints/step_0000000$expect (step $expect)"
  check "$phase (rank $rank): the same losses" same_losses_from $((expect + 1)) "$tmp/sync.log" "$tmp/out"
  check "$phase (rank $rank): bitwise the uninterrupted final state" \
    [ "$(digest 8 "$tmp/out")" = "$(digest 8 "$tmp/sync.log")" ]
  check "$phase (rank $rank): metrics.h5 holds every step once" same_history "$tmp/$dir" "$tmp/sync"
done

# A write that fails ends the run, naming the file, on every rank.
PIPETRAIN_TEST_ASYNC_SAVE_FAULT=1:4:write_error run 2 train $deck "${common[@]}" "${async[@]}" \
  --set output.dir=\"$tmp/err\"
check "a failed write ends the run" status_not
check "the message names the file" \
  output_has "checkpoint write failed: cannot write $tmp/err/checkpoints/step_00000004.tmp/stage_001.h5"
check "latest stays on the previous checkpoint" latest_is err 2
check "no rank is left behind" no_leftovers

# A stop signal after step 5: the save of step 4 in flight and the stop's own
# save of step 5 are both published before exit 75.
PIPETRAIN_TEST_SIGNAL=1:4 run 2 train $deck "${common[@]}" "${async[@]}" --set output.dir=\"$tmp/stop\"
check "a signal stops the run with status 75" status_is 75
check "the save in flight was published" output_has "checkpoint step 4: $tmp/stop/checkpoints/step_00000004"
check "the stop's save was published" latest_is stop 5
run 2 train $deck "${common[@]}" "${async[@]}" --set output.dir=\"$tmp/stop\" --resume
check "resumed after the stop: bitwise the uninterrupted final state" \
  [ "$(digest 8 "$tmp/out")" = "$(digest 8 "$tmp/sync.log")" ]

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
