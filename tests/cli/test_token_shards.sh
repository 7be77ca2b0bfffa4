#!/usr/bin/env bash
# test_token_shards.sh: from a real text corpus to a trained GPT, end to end
# (#43, part 1).
#   tests/cli/test_token_shards.sh BUILD_DIR
# tools/make_token_file.py trains a byte-level BPE on the license texts of
# Debian's base-files (/usr/share/common-licenses) and writes small shards;
# pipetrain trains on them on 2 ranks through glob patterns, with held-out
# evaluation and data.tokenizer, and writes the files it read into
# deck.resolved.toml; a job killed after a checkpoint and resumed over the
# shards has the uninterrupted run's history bit for bit; and each bad input
# (a missing shard, a pattern matching nothing, shards of two tokenizers, a
# tokenizer that is not the deck's, a vocabulary larger than the model's)
# stops the job before step 0 with its one message. Runs take seconds.
source "$(dirname "$0")/lib.sh" "$1"
need_tools_python
corpus=/usr/share/common-licenses
[ -d "$corpus" ] || { echo "FAIL $corpus is missing (Debian's base-files installs it)"; echo "0 passed, 1 failed"; exit 1; }

tool() { "$py" tools/make_token_file.py --quiet "$@" > "$tmp/out" 2>&1; status=$?; }

tool --out-dir "$tmp/c" --vocab-size 512 --eval-fraction 0.1 --shard-tokens 20000 "$corpus"
check "the tool writes a tokenizer and shards" status_is 0
check "several training shards" test "$(ls "$tmp"/c/train_*.h5 | wc -l)" -ge 3
check "held-out shards" test -s "$tmp/c/eval_00000.h5"
# A second tokenizer (another vocabulary) for the mixed-tokenizer cases.
tool --out-dir "$tmp/other" --vocab-size 300 --shard-tokens 20000 "$corpus"
check "a second tokenizer run" status_is 0

cat > "$tmp/deck.toml" <<DECK
[model]
type = "gpt"
vocab_size = 512
seq_len = 32
d_model = 32
heads = 2
blocks = 2
[data]
type = "hdf5"
path = "$tmp/c/train_*.h5"
eval_path = "$tmp/c/eval_*.h5"
tokenizer = "$tmp/c/tokenizer.json"
shuffle = true
[training]
steps = 6
batch_size = 8
lr = 3e-3
eval_every = 3
eval_batches = 2
blas_threads = 1
[pipeline]
micro_batches = 2
[output]
dir = "$tmp/straight"
checkpoint_every = 3
DECK

run 2 train "$tmp/deck.toml"
check "training on shards by pattern succeeds" status_is 0
check "held-out loss printed" output_has "| eval "
check "the resolved deck lists the shards it read" \
  grep -qF "path = [\"$tmp/c/train_00000.h5\", \"$tmp/c/train_00001.h5\", \"$tmp/c/train_00002.h5\"" "$tmp/straight/deck.resolved.toml"
check "... and the held-out shard" grep -qF "eval_path = [\"$tmp/c/eval_00000.h5\"]" "$tmp/straight/deck.resolved.toml"

# Killed just after the checkpoint of step 3, then resumed over the shards.
PIPETRAIN_TEST_KILL_AFTER_PUBLISH=0:3 run 2 train "$tmp/deck.toml" --set output.dir=\"$tmp/resumed\"
check "interrupted after the checkpoint of step 3" output_has "killed at the checkpoint of step 3"
run 2 train "$tmp/deck.toml" --set output.dir=\"$tmp/resumed\" --resume
check "resume over the shards succeeds" status_is 0
same_history "$tmp/resumed" "$tmp/straight"
status=$?
check "the resumed history equals the uninterrupted one bit for bit" status_is 0

# Bad inputs: one message each, before step 0, every rank exits.
run 2 train "$tmp/deck.toml" --set "data.path=[\"$tmp/c/train_00000.h5\", \"$tmp/c/train_00009.h5\"]"
check "missing shard exits non-zero" status_not
check "missing shard named with its list entry" output_has "data.path entry 1 = \"$tmp/c/train_00009.h5\": '$tmp/c/train_00009.h5': no such file; expected an HDF5 token file"

run 2 train "$tmp/deck.toml" --set "data.eval_path=$tmp/c/held_*.h5"
check "pattern matching nothing exits non-zero" status_not
check "pattern matching nothing explained" output_has "data.eval_path = \"$tmp/c/held_*.h5\": matches no file"

run 2 train "$tmp/deck.toml" --set "data.path=[\"$tmp/c/train_*.h5\", \"$tmp/other/train_00000.h5\"]" \
  --set "data.tokenizer=\"\""
check "shards of two tokenizers exit non-zero" status_not
check "shards of two tokenizers explained" output_has "all token files of a run must come from one tokenizer"

run 2 train "$tmp/deck.toml" --set "data.tokenizer=$tmp/other/tokenizer.json"
check "a tokenizer other than the deck's exits non-zero" status_not
check "a tokenizer other than the deck's explained" \
  output_has "but --set data.tokenizer=$tmp/other/tokenizer.json: data.tokenizer = \"$tmp/other/tokenizer.json\" is the tokenizer of SHA-256"

run 2 train "$tmp/deck.toml" --set model.vocab_size=300
check "vocabulary larger than the model exits non-zero" status_not
check "vocabulary larger than the model explained" \
  output_has "the file's tokenizer has 512 tokens (its vocab_size attribute): set model.vocab_size to at least that"

echo "token shards: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
