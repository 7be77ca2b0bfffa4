#!/usr/bin/env bash
# test_profile.sh: `pipetrain profile` end to end: on 1 and 2 ranks it prints
# the unit table (and the link on 2 ranks) and writes a profile.h5 that h5py
# reads with the documented layout (tests/cli/check_profile_h5.py); the
# default output is <output.dir>/profile.h5; bad inputs get their message.
#   tests/cli/test_profile.sh BUILD_DIR
source "$(dirname "$0")/lib.sh" "$1"
py=tools/.venv/bin/python
mlp_units=linear0,linear1,linear2,linear3,linear4,linear5,linear6,linear7

run 1 profile inputs/mlp_small.toml --out "$tmp/p1.h5" --reps 3
check "profile on 1 rank succeeds" status_is 0
check "it prints the model" output_has "profile of mlp input_dim=16 hidden_dim=32"
check "it prints a row per unit" bash -c "grep -c '^linear[0-7] ' '$tmp/out' | grep -qx 8"
check "it says the link needs 2 ranks" output_has "link: not measured on 1 rank"
check "it names the file" output_has "profile: $tmp/p1.h5"
check "profile.h5 of 1 rank has the documented layout" $py tests/cli/check_profile_h5.py "$tmp/p1.h5" $mlp_units no

run 2 profile inputs/mlp_small.toml --out "$tmp/p2.h5" --reps 3
check "profile on 2 ranks succeeds" status_is 0
check "it prints the link" output_has "link rank 0 <-> 1: latency"
check "profile.h5 of 2 ranks has the documented layout and a link" $py tests/cli/check_profile_h5.py "$tmp/p2.h5" $mlp_units yes

run 2 profile inputs/gpt_markov.toml --out "$tmp/gpt.h5" --reps 2
check "GPT profile succeeds" status_is 0
check "GPT profile has the pinned units" $py tests/cli/check_profile_h5.py "$tmp/gpt.h5" embedding,block0,block1,block2,block3,head yes
check "pinned units are not partitionable" $py -c "
import h5py, sys
p = list(h5py.File(sys.argv[1])['units/partitionable'][:])
assert p == [0, 1, 1, 1, 1, 0], p" "$tmp/gpt.h5"

run 1 profile inputs/mlp_small.toml --reps 2 --set output.dir=\"$tmp/dflt\"
check "default output is <output.dir>/profile.h5" test -s "$tmp/dflt/profile.h5"
check "no temporary file left" bash -c "! ls '$tmp/dflt' | grep -q '\\.tmp$'"

run 1 profile inputs/mlp_small.toml --reps 2 --ranks 4 --out "$tmp/r4.h5"
check "--ranks 4 profiles for a 4-rank run" status_is 0
run 1 profile inputs/gpt_markov.toml --ranks 8 --out "$tmp/r8.h5"
check "--ranks checks the deck against P ranks" output_has "model.blocks = 4: must be >= the number of stages (8"

# Bad inputs: one message each, non-zero exit, nothing written.
run 1 profile inputs/mlp_small.toml --reps 0
check "--reps 0 refused" status_not
check "--reps 0 explained" output_has "--reps"
run 1 profile inputs/mlp_small.toml --out "$tmp/missing/dir/p.h5"
check "--out in a missing directory refused" status_not
check "--out in a missing directory explained" output_has "--out $tmp/missing/dir/p.h5: directory '$tmp/missing/dir' does not exist"
mkdir -p "$tmp/isdir.h5"
run 1 profile inputs/mlp_small.toml --out "$tmp/isdir.h5"
check "--out naming a directory refused" \
  output_has "--out $tmp/isdir.h5: a directory; --out names the file the profile is written to, e.g. --out $tmp/isdir.h5/profile.h5"
run 2 profile tests/decks/bad_batch.toml
check "a bad deck is refused with its message" output_has "must be divisible by pipeline.micro_batches"
run 1 profile
check "a missing deck is refused" status_not
run 1 frobnicate inputs/mlp_small.toml
check "an unknown command names every command" output_has "expected train, validate, profile, plan or sample"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
