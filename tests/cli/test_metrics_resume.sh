#!/usr/bin/env bash
# test_metrics_resume.sh: the per-step history in metrics.h5 survives a job
# killed around a checkpoint's publication.
#   tests/cli/test_metrics_resume.sh BUILD_DIR
# Rank 0 is killed just before a checkpoint is written (metrics.h5 already
# flushed; hook PIPETRAIN_TEST_KILL_BEFORE_PUBLISH=<rank>:<step>), rank 1 in
# the middle of writing it (PIPETRAIN_TEST_CRASH_IN_CHECKPOINT), and rank 0
# just after `latest` names it (PIPETRAIN_TEST_KILL_AFTER_PUBLISH). After
# --resume, h5py finds in metrics.h5 every step 0..7 exactly once, with the
# losses, learning rates, gradient norms and held-out losses of an
# uninterrupted run bit for bit, and the resume steps in resumed_at_steps.
# Every run is under `timeout`, so a hang fails the test.
source "$(dirname "$0")/lib.sh" "$1"
need_tools_python

deck=inputs/mlp_small.toml
common=(--set training.steps=8 --set training.lr_schedule=\"cosine\" --set training.eval_every=3
        --set output.checkpoint_every=2)
latest_is() { grep -qx "step_0000000$2" "$1/checkpoints/latest"; }

# history DIR RESUMES [STAGES]: sets status 0 when DIR/metrics.h5 holds steps 0..7 once each, the
# uninterrupted run's values, resumed_at_steps = RESUMES (comma-separated)
# and no missing_steps; the first STAGES memory columns of each row are set.
history() {
  "$py" - "$tmp/straight/metrics.h5" "$1/metrics.h5" "$2" "${3:-2}" > "$tmp/out" 2>&1 <<'PY'
import h5py, numpy as np, sys
want, got, resumes, stages = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split(",")], int(sys.argv[4])
with h5py.File(want) as a, h5py.File(got) as b:
    n = len(a["step"])
    assert n == 8 and list(b["step"][:]) == list(range(n)), f"steps {list(b['step'][:])}"
    for name in ("loss", "lr", "grad_norm", "eval_loss"):
        assert a[name][:].tobytes() == b[name][:].tobytes(), f"{name}: {a[name][:]} != {b[name][:]}"
    assert sorted(a) == sorted(b), f"datasets {sorted(a)} != {sorted(b)}"
    for name in b:
        assert b[name].shape[0] == n, f"{name}: {b[name].shape[0]} rows"
    for name in ("step_time_s", "samples_per_s", "bubble"):
        assert np.all(np.isfinite(b[name][:])), f"{name}: {b[name][:]}"
    for name in (k for k in b if k.startswith("peak_bytes_")):
        assert np.all(np.isfinite(b[name][:, :stages])), f"{name}: {b[name][:]}"
    assert np.all(b["peak_bytes_total"][:, :stages] > 0)
    assert list(b.attrs["resumed_at_steps"]) == resumes, f"resumed_at_steps {b.attrs['resumed_at_steps']}"
    assert "missing_steps" not in b.attrs
print("history complete")
PY
  status=$?
}

# The uninterrupted run.
run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/straight\"
check "uninterrupted run succeeds" status_is 0

# Killed just after `latest` moved to step 4 (the case that lost steps 0..3).
PIPETRAIN_TEST_KILL_AFTER_PUBLISH=0:4 run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/after\"
check "after publish: killed" output_has "PIPETRAIN_TEST_KILL_AFTER_PUBLISH: killed at the checkpoint of step 4"
check "after publish: latest names step 4" latest_is "$tmp/after" 4
run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/after\" --resume
check "after publish: resume succeeds" status_is 0
check "after publish: history kept" output_has "$tmp/after/metrics.h5: resuming at step 4; the rows of steps 0..3 are kept"
check "after publish: no earlier file renamed away" bash -c "! ls '$tmp/after' | grep -q before_resume"
history "$tmp/after" 4
check "after publish: every step once, same values" status_is 0

# Killed just before the checkpoint of step 4 is written: latest stays at 2,
# metrics.h5 already holds steps 0..3; the resume drops 2..3 and redoes them.
PIPETRAIN_TEST_KILL_BEFORE_PUBLISH=0:4 run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/before\"
check "before publish: killed" output_has "PIPETRAIN_TEST_KILL_BEFORE_PUBLISH: killed at the checkpoint of step 4"
check "before publish: latest names step 2" latest_is "$tmp/before" 2
run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/before\" --resume
check "before publish: resume succeeds" status_is 0
check "before publish: redone rows dropped" output_has "the rows of steps 0..1 are kept; 2 later row(s), redone now, dropped"
history "$tmp/before" 2
check "before publish: every step once, same values" status_is 0

# Rank 1 killed in the middle of writing the checkpoint of step 6.
PIPETRAIN_TEST_CRASH_IN_CHECKPOINT=1:6 run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/during\"
check "during the write: killed" output_has "killed while writing"
check "during the write: latest names step 4" latest_is "$tmp/during" 4
run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/during\" --resume
check "during the write: resume succeeds" status_is 0
history "$tmp/during" 4
check "during the write: every step once, same values" status_is 0

# Two kills in one history: after publishing step 2, then (resumed) before step 6.
PIPETRAIN_TEST_KILL_AFTER_PUBLISH=0:2 run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/twice\"
PIPETRAIN_TEST_KILL_BEFORE_PUBLISH=0:6 run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/twice\" --resume
check "two kills: second kill before step 6" output_has "PIPETRAIN_TEST_KILL_BEFORE_PUBLISH: killed at the checkpoint of step 6"
run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/twice\" --resume
check "two kills: resume succeeds" status_is 0
history "$tmp/twice" 2,4
check "two kills: every step once, same values" status_is 0

# Resumed on 4 ranks: the memory columns widen to 4 stages, NaN where the
# 2-stage rows have none.
PIPETRAIN_TEST_KILL_AFTER_PUBLISH=0:4 run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/wider\"
run 4 train $deck "${common[@]}" --set output.dir=\"$tmp/wider\" --resume
check "2 -> 4 ranks: resume succeeds" status_is 0
history "$tmp/wider" 4
check "2 -> 4 ranks: every step once, same values" status_is 0
check "2 -> 4 ranks: 4 memory columns, NaN for the stages the first rows lacked" "$py" -c "
import h5py, numpy as np, sys
m = h5py.File(sys.argv[1])['peak_bytes_total'][:]
assert m.shape == (8, 4) and np.isnan(m[:4, 2:]).all() and np.isfinite(m[4:]).all(), m
" "$tmp/wider/metrics.h5"

# Resumed into a run directory without the earlier metrics.h5: the gap is
# said once and recorded.
run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/elsewhere\" --resume "$tmp/straight/checkpoints/step_00000004"
check "gap: resume succeeds" status_is 0
check "gap: said once" output_has "pipetrain: warning: $tmp/elsewhere/metrics.h5 has no rows for steps 0..3 (before the resume step 4): there was no earlier metrics.h5; recorded in its attribute missing_steps"
check "gap: recorded" "$py" -c "
import h5py, sys
f = h5py.File(sys.argv[1])
assert list(f['step'][:]) == [4, 5, 6, 7] and list(f.attrs['missing_steps']) == [0, 3], dict(f.attrs)
" "$tmp/elsewhere/metrics.h5"

# An unreadable metrics.h5 is moved aside, not overwritten, and the gap said.
cp -r "$tmp/straight" "$tmp/garbled"
echo "not HDF5" > "$tmp/garbled/metrics.h5"
run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/garbled\" --resume "$tmp/garbled/checkpoints/step_00000006"
check "unreadable: resume succeeds" status_is 0
check "unreadable: said" output_has "has no rows for steps 0..5 (before the resume step 6): the earlier file could not be read (not an HDF5 file) and was moved to $tmp/garbled/metrics.unreadable_6.h5"
check "unreadable: kept aside" grep -qx "not HDF5" "$tmp/garbled/metrics.unreadable_6.h5"

# A metrics.h5 whose series disagree with its steps (here 'step' has a row
# more than 'loss') is unreadable as a whole: moved aside, its rows never
# replaced by NaN, and no row invented.
cp -r "$tmp/straight" "$tmp/uneven"
"$py" -c "
import h5py, sys
with h5py.File(sys.argv[1], 'a') as f:
    steps = list(f['step'][:])
    del f['step']
    f['step'] = steps + [len(steps)]
" "$tmp/uneven/metrics.h5"
run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/uneven\" --resume "$tmp/uneven/checkpoints/step_00000006"
check "uneven: resume succeeds" status_is 0
check "uneven: said, naming the series" output_has "is not a 1-D number series of the 9 rows of 'step') and was moved to $tmp/uneven/metrics.unreadable_6.h5"
check "uneven: kept aside whole" "$py" -c "
import h5py, sys, numpy as np
f = h5py.File(sys.argv[1])
assert len(f['step']) == 9 and len(f['loss']) == 8 and np.isfinite(f['loss'][:]).all()
" "$tmp/uneven/metrics.unreadable_6.h5"
check "uneven: no row invented" "$py" -c "
import h5py, sys
f = h5py.File(sys.argv[1])
assert list(f['step'][:]) == [6, 7] and list(f.attrs['missing_steps']) == [0, 5], (f['step'][:], dict(f.attrs))
" "$tmp/uneven/metrics.h5"

echo "metrics resume cli: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
