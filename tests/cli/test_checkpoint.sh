#!/usr/bin/env bash
# test_checkpoint.sh: checkpoints end to end under mpirun.
#   tests/cli/test_checkpoint.sh BUILD_DIR
# A rank killed in the middle of a checkpoint write (fault injection through
# PIPETRAIN_TEST_CRASH_IN_CHECKPOINT=<rank>:<step>) leaves `latest` on the
# previous checkpoint, and --resume continues bit for bit (same losses, same
# checkpoint digest as the uninterrupted run), also at other rank counts.
# A broken `latest` falls back with a warning; each bad checkpoint exits
# non-zero with one message naming the file and the problem, without a hang
# (every case runs under `timeout`). The h5py cases (tools/.venv) read a
# checkpoint and write one from scratch, as docs/checkpoint-format.md says.
source "$(dirname "$0")/lib.sh" "$1"
py=tools/.venv/bin/python
one_error() { [ "$(grep -c 'pipetrain: error:' "$tmp/out")" -eq 1 ]; }
losses() { grep -o '^step *[0-9]*/[0-9]* | loss [0-9.]*' "$1" | sed 's/  */ /g'; }
same_losses_from() {  # same_losses_from STEP FILE_A FILE_B: step lines >= STEP agree
  diff <(losses "$2" | awk -v s="$1" '{split($2, a, "/"); if (a[1] >= s) print}') \
       <(losses "$3" | awk -v s="$1" '{split($2, a, "/"); if (a[1] >= s) print}')
}

deck=inputs/mlp_small.toml
common=(--set training.steps=8 --set training.lr_schedule=\"cosine\" --set output.checkpoint_every=2)

# The uninterrupted run: checkpoints at steps 2, 4, 6, 8 (the last 3 kept).
run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/straight\"
cp "$tmp/out" "$tmp/straight.log"
check "training with checkpoints succeeds" status_is 0
check "checkpoint line printed" output_has "checkpoint step 8: $tmp/straight/checkpoints/step_00000008"
check "latest names the last checkpoint" grep -qx step_00000008 "$tmp/straight/checkpoints/latest"
check "checkpoint_keep = 3 keeps three" \
  bash -c "[ \"\$(ls -d '$tmp'/straight/checkpoints/step_* | wc -l)\" -eq 3 ]"
want=$(digest 8 "$tmp/straight.log")

# Kill rank 1 while it writes the step-6 checkpoint.
PIPETRAIN_TEST_CRASH_IN_CHECKPOINT=1:6 run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/crash\"
check "killed rank ends the job" status_not
check "the kill happened inside the write" output_has "killed while writing $tmp/crash/checkpoints/step_00000006.tmp/stage_001.h5"
check "latest still names the previous checkpoint" grep -qx step_00000004 "$tmp/crash/checkpoints/latest"
check "no step_00000006 was published" test ! -e "$tmp/crash/checkpoints/step_00000006"
check "the partial write stays under .tmp" test -d "$tmp/crash/checkpoints/step_00000006.tmp"

# Resume from latest: steps 5..8 as in the uninterrupted run, bit for bit.
run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/crash\" --resume
check "resume succeeds" status_is 0
check "resumes from the previous good checkpoint" output_has "resuming from $tmp/crash/checkpoints/step_00000004 (step 4)"
check "resumed losses equal the uninterrupted run's" same_losses_from 5 "$tmp/straight.log" "$tmp/out"
check "resumed final state is bitwise the uninterrupted one" [ "$(digest 8 "$tmp/out")" = "$want" ]
check "the last line counts only the steps this process ran" \
  output_has "done: 8 steps, the last 4 of them run by this process (resumed at step 4) in "
check "stale .tmp removed by the next save" test ! -e "$tmp/crash/checkpoints/step_00000006.tmp"
check "metrics.h5 of the resumed run written" test -s "$tmp/crash/metrics.h5"
check "metrics.h5 continues the earlier run's" output_has "$tmp/crash/metrics.h5: resuming at step 4; the rows of steps 0..3 are kept"

# Resharding: the 2-stage checkpoint of step 4 continues on 4 and on 1 rank.
for np in 4 1; do
  run $np train $deck "${common[@]}" --set output.dir=\"$tmp/reshard$np\" \
    --resume "$tmp/straight/checkpoints/step_00000004"
  check "2 -> $np stages: resume succeeds" status_is 0
  check "2 -> $np stages: same losses" same_losses_from 5 "$tmp/straight.log" "$tmp/out"
  check "2 -> $np stages: bitwise the same final state" [ "$(digest 8 "$tmp/out")" = "$want" ]
done

# Several stages per rank (ZB-V: 4 stages on 2 ranks, each rank's file holds
# two stages): the same state gives the same digest.
run 2 train $deck "${common[@]}" --set pipeline.schedule=\"zb-v\" --set output.dir=\"$tmp/zbv\" \
  --resume "$tmp/straight/checkpoints/step_00000004"
check "2 stages -> ZB-V's 2 stages per rank: resume succeeds" status_is 0
check "... bitwise the same final state, with the same digest" [ "$(digest 8 "$tmp/out")" = "$want" ]

# A broken latest: fall back to the previous good checkpoint, with a warning.
cp -r "$tmp/straight" "$tmp/fallback"
truncate -s 1000 "$tmp/fallback/checkpoints/step_00000008/stage_000.h5"
run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/fallback\" --resume latest
check "broken latest: resume succeeds" status_is 0
check "broken latest: warning names file and problem" \
  output_has "warning: checkpoint $tmp/fallback/checkpoints/step_00000008/stage_000.h5: truncated: 1000 bytes on disk"
check "broken latest: falls back to step 6" output_has "resuming from $tmp/fallback/checkpoints/step_00000006 (step 6)"
check "broken latest: bitwise the same final state" [ "$(digest 8 "$tmp/out")" = "$want" ]

# Bad checkpoints named explicitly: one message, non-zero exit, every rank ends.
bad_case() {  # bad_case NAME EXPECTED-TEXT ARGS...
  local name=$1 text=$2; shift 2
  run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/bad\" "$@"
  check "$name: exits non-zero" status_not
  check "$name: says so" output_has "$text"
  check "$name: one message" one_error
}
ck=$tmp/straight/checkpoints
cp -r "$ck/step_00000006" "$tmp/trunc"
truncate -s 2000 "$tmp/trunc/stage_001.h5"
bad_case "truncated file" "checkpoint $tmp/trunc/stage_001.h5: truncated: 2000 bytes on disk" --resume "$tmp/trunc"
bad_case "shape differs" "params/unit0.linear.weight/value has shape (32, 16) but the deck's model needs (48, 16)" \
  --set model.hidden_dim=48 --resume "$ck/step_00000006"
bad_case "missing layer" "missing layer(s) unit8.linear.weight, unit8.linear.bias" \
  --set model.depth=9 --resume "$ck/step_00000006"
# Another model of the same shapes (the activation): refused on resume.
bad_case "another model, same shapes" \
  "saved with another model: model.activation = \"relu\" (--set model.activation=\"relu\"), the checkpoint's \"gelu\"" \
  --set model.activation=\"relu\" --resume "$ck/step_00000006"
# A refused resume, and one with nothing left to train, leave the run's
# deck.resolved.toml and profile.h5 as they were.
cp -r "$tmp/straight" "$tmp/kept"
run 2 train $deck "${common[@]}" --set model.hidden_dim=48 --set output.dir=\"$tmp/kept\" --resume
check "refused resume: exits with status 2" status_is 2
check "... deck.resolved.toml as it was" cmp -s "$tmp/straight/deck.resolved.toml" "$tmp/kept/deck.resolved.toml"
check "... profile.h5 as it was" cmp -s "$tmp/straight/profile.h5" "$tmp/kept/profile.h5"
run 2 train $deck "${common[@]}" --set pipeline.schedule=\"gpipe\" --set output.dir=\"$tmp/kept\" --resume
check "nothing to train: says so" output_has "nothing to train: the checkpoint is at step 8"
check "... deck.resolved.toml as it was" cmp -s "$tmp/straight/deck.resolved.toml" "$tmp/kept/deck.resolved.toml"
check "... profile.h5 as it was" cmp -s "$tmp/straight/profile.h5" "$tmp/kept/profile.h5"
bad_case "no such checkpoint" "checkpoint $tmp/nowhere: no such file or directory" --resume "$tmp/nowhere"
bad_case "bad training.init_from" "checkpoint $tmp/nowhere: no such file or directory" \
  --set training.init_from=\"$tmp/nowhere\"
bad_case "nothing to resume" "checkpoint $tmp/empty: no checkpoint here" \
  --set output.checkpoint_dir=\"$tmp/empty\" --resume

if [ ! -x "$py" ]; then
  failed=$((failed + 1)); echo "FAIL $py missing: run scripts/setup-tools-venv.sh"
else
  # Checksum mismatch: one weight changed behind the checkpoint's back.
  cp -r "$ck/step_00000006" "$tmp/flip"
  "$py" -c "
import h5py, sys
with h5py.File(sys.argv[1], 'r+') as f:
    d = f['params/unit7.linear.weight/state1']; v = d[...]; v.flat[3] += 1.0; d[...] = v
" "$tmp/flip/stage_001.h5"
  # Caught in the whole file's bytes, before HDF5 reads the file.
  bad_case "checksum mismatch" "checkpoint $tmp/flip/stage_001.h5: damaged or edited: its bytes have CRC-32 " \
    --resume "$tmp/flip"
  # A newer format version.
  cp -r "$ck/step_00000006" "$tmp/newer"
  rm "$tmp/newer/manifest.crc32"  # the whole-file checksum a newer writer would have written anew
  "$py" -c "
import h5py, sys
with h5py.File(sys.argv[1], 'r+') as f: f.attrs['format_version'] = 99
" "$tmp/newer/manifest.h5"
  bad_case "newer format version" "checkpoint $tmp/newer/manifest.h5: format_version 99 is newer than this pipetrain reads" \
    --resume "$tmp/newer"

  # Files that were not saved together, and damaged names: each is applied
  # to a copy of the uninterrupted run; its step-8 checkpoint named
  # explicitly is refused with the message, and --resume latest falls back
  # to step 6 with a warning that says the same, and continues bit for bit.
  run 2 train $deck "${common[@]}" --set model.init_seed=99 --set data.seed=98 --set output.dir=\"$tmp/other\"
  check "another run with other seeds" status_is 0
  mm=$tmp/mm/checkpoints
  mismatch_case() {  # mismatch_case NAME EXPECTED-TEXT DAMAGE-COMMAND...
    local name=$1 text=$2; shift 2
    rm -rf "$tmp/mm"; cp -r "$tmp/straight" "$tmp/mm"
    "$@"
    bad_case "$name" "checkpoint $text" --resume "$mm/step_00000008"
    cp "$tmp/out" "$tmp/refused.log"
    run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/mm\" --resume latest
    check "$name: latest falls back with a warning" output_has "warning: checkpoint $text"
    check "$name: latest resumes from step 6" output_has "resuming from $mm/step_00000006 (step 6)"
    check "$name: bitwise the same final state" [ "$(digest 8 "$tmp/out")" = "$want" ]
  }
  h5edit() {  # h5edit FILE PYTHON: runs PYTHON with f = the file opened for writing
    "$py" -c "import h5py, sys
with h5py.File(sys.argv[1], 'r+') as f: $2" "$1"
  }
  h5edit_older() {  # the same, without manifest.crc32 (as one copied without it): the manifest's own checks
    rm "$(dirname "$1")/manifest.crc32"
    h5edit "$@"
  }
  overwrite_bytes() {  # overwrite_bytes FILE OFFSET: 4 bytes there (the review's crash of HDF5 at 4608)
    printf '\xde\xad\xbe\xef' | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
  }
  mismatch_case "stage file of an older checkpoint" \
    "$mm/step_00000008/stage_001.h5: written by another save, or damaged where it records its checkpoint_id: its bytes do not hold the checkpoint_id " \
    cp "$mm/step_00000006/stage_001.h5" "$mm/step_00000008/stage_001.h5"
  mismatch_case "stage file of another run" \
    "$mm/step_00000008/stage_001.h5: written by another save, or damaged where it records its checkpoint_id: its bytes do not hold the checkpoint_id " \
    cp "$tmp/other/checkpoints/step_00000008/stage_001.h5" "$mm/step_00000008/stage_001.h5"
  # Any change to a file's bytes is found before HDF5 parses it (its CRC-32
  # is in manifest.crc32 or the manifest): an edit, and bytes overwritten
  # where they once crashed the HDF5 library.
  mismatch_case "edited manifest step" \
    "$mm/step_00000008/manifest.h5: damaged or edited: its " \
    h5edit "$mm/step_00000008/manifest.h5" "f.attrs['step'] = 10"
  for offset in 3000 4608 5120; do
    mismatch_case "manifest bytes overwritten at $offset" \
      "$mm/step_00000008/manifest.h5: damaged or edited: its bytes have CRC-32 " \
      overwrite_bytes "$mm/step_00000008/manifest.h5" $offset
  done
  # In a checkpoint without the whole-file checksums, the manifest checks
  # itself (manifest_crc32, #44): its edit is named as such.
  mismatch_case "edited manifest step, older checkpoint" \
    "$mm/step_00000008/manifest.h5: its contents have crc32 0x" \
    h5edit_older "$mm/step_00000008/manifest.h5" "f.attrs['step'] = 10"
  # A stage file is checked whole whenever the manifest records its CRC-32,
  # also without manifest.crc32.
  mismatch_case "renamed dataset" \
    "$mm/step_00000008/stage_001.h5: damaged or edited: its bytes have CRC-32 " \
    h5edit_older "$mm/step_00000008/stage_001.h5" "f.move('params/unit7.linear.weight', 'params/unit7.linear.weigXt')"
  check "renamed dataset: not reported as a model that differs" \
    bash -c "! grep -q 'missing layer' '$tmp/refused.log' '$tmp/out'"
  mismatch_case "damaged manifest format" \
    "$mm/step_00000008/manifest.h5: attribute format is \"pipetrain-chec\"" \
    h5edit_older "$mm/step_00000008/manifest.h5" "f.attrs['format'] = 'pipetrain-chec'"
  mismatch_case "damaged manifest format_version" \
    "$mm/step_00000008/manifest.h5: attribute format_version is damaged" \
    h5edit_older "$mm/step_00000008/manifest.h5" "f.attrs['format_version'] = '#2'"

  # An h5py user reads a checkpoint (checking the CRCs) and writes a new one
  # from scratch, as format_version 2 (without the manifest's own checksum,
  # which only pipetrain computes): weights only, one file for all layers. Loading it with
  # training.init_from gives the same run as loading the original.
  "$py" - "$ck/step_00000006" "$tmp/byhand" > "$tmp/out" 2>&1 <<'PY'
import h5py, numpy as np, os, sys, uuid, zlib
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst)
weights = {}
with h5py.File(os.path.join(src, "manifest.h5")) as m:
    assert m.attrs["format"] == "pipetrain-checkpoint" and m.attrs["format_version"] == 3
    step, save = m.attrs["step"], m.attrs["checkpoint_id"]
    for name, listed in m["files"].items():
        crcs = dict(zip(listed["datasets"].asstr()[...], listed["crc32"][...]))
        with h5py.File(os.path.join(src, name)) as f:
            assert f.attrs["step"] == step and f.attrs["checkpoint_id"] == save, name
            for p, g in f["params"].items():
                v = g["value"][...]
                crc = zlib.crc32(v.astype("<f4").tobytes())
                assert crc == g["value"].attrs["crc32"] == crcs[f"params/{p}/value"], p
                weights[p] = v
save = uuid.uuid4().hex
names, crcs = [], []
with h5py.File(os.path.join(dst, "all.h5"), "w") as f:
    f.attrs.update(format="pipetrain-checkpoint-stage", format_version=2, step=0, checkpoint_id=save)
    for p, v in weights.items():
        d = f.create_dataset(f"params/{p}/value", data=v.astype("<f4"))
        d.attrs["crc32"] = zlib.crc32(d[...].tobytes())
        names.append(d.name[1:]); crcs.append(d.attrs["crc32"])
with h5py.File(os.path.join(dst, "manifest.h5"), "w") as m:
    m.attrs.update(format="pipetrain-checkpoint", format_version=2, step=0, checkpoint_id=save)
    g = m.create_group("files/all.h5")
    g.attrs["bytes"] = os.path.getsize(os.path.join(dst, "all.h5"))
    g["datasets"] = np.array(names, dtype=h5py.string_dtype())
    g["crc32"] = np.array(crcs, dtype="<i8")
print("wrote", len(weights), "parameters")
PY
  status=$?
  check "h5py reads a checkpoint and writes one" status_is 0
  run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/init_a\" --set training.init_from=\"$ck/step_00000006\"
  cp "$tmp/out" "$tmp/init_a.log"
  check "init_from a pipetrain checkpoint" output_has "weights initialised from $ck/step_00000006"
  run 4 train $deck "${common[@]}" --set output.dir=\"$tmp/init_b\" --set training.init_from=\"$tmp/byhand\"
  check "init_from the h5py-written checkpoint" output_has "weights initialised from $tmp/byhand"
  check "both give the same run" same_losses_from 1 "$tmp/init_a.log" "$tmp/out"
  run 2 train $deck "${common[@]}" --set output.dir=\"$tmp/bad\" --resume "$tmp/byhand"
  check "weights-only checkpoint cannot resume" output_has "has no state1: the checkpoint lacks the optimizer state"
fi

# A fresh run (no --resume) into the directory of an earlier run with
# checkpoints moves that run's checkpoints and files aside before it writes:
# nothing of the earlier run is overwritten, and a later --resume finds only
# the new run's checkpoints.
cp -r "$tmp/straight" "$tmp/again"
run 2 train $deck --set training.steps=4 --set output.checkpoint_every=2 --set output.dir=\"$tmp/again\"
check "a fresh run into an earlier run's directory succeeds" status_is 0
check "it says where the earlier run went" output_has "held checkpoints of an earlier run ($tmp/again/checkpoints)"
aside=$(ls -d "$tmp"/again/previous_* 2> /dev/null | head -1)
check "the earlier checkpoints are kept whole" grep -qx step_00000008 "${aside:-none}/checkpoints/latest"
check "the earlier metrics.h5 is kept" test -s "${aside:-none}/metrics.h5"
check "latest names the new run's checkpoint" grep -qx step_00000004 "$tmp/again/checkpoints/latest"
check "no earlier step directory is left beside the new ones" test ! -e "$tmp/again/checkpoints/step_00000008"

echo "checkpoint cli: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
