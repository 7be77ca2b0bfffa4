#!/usr/bin/env bash
# test_sample.sh: `pipetrain sample` and output.sample_every end to end.
#   tests/cli/test_sample.sh BUILD_DIR
# A tiny GPT trained for 4 steps on Markov data (token ids, no tokenizer) and
# on a byte token file: the same seed prints the same text, on 1 rank and on
# 2 (the checkpoint is layout-free); greedy likewise; another seed differs.
# output.sample_every prints samples and leaves training bitwise unchanged
# (same losses, same checkpoint digest). Bad inputs (a prompt longer than the
# context, a tokenizer larger than the model, an MLP deck or checkpoint, more
# ranks than blocks) each give one message and a non-zero exit, no hang.
source "$(dirname "$0")/lib.sh" "$1"
need_tools_python
one_error() { [ "$(grep -c 'pipetrain: error:' "$tmp/out")" -eq 1 ]; }
losses() { grep -o '^step *[0-9]*/[0-9]* | loss [0-9.]*' "$1"; }
text() { cat "$tmp/text"; }  # what the last sample printed on stdout

cat > "$tmp/gpt.toml" <<TOML
[model]
type = "gpt"
vocab_size = 16
seq_len = 16
d_model = 16
heads = 2
blocks = 2
[data]
type = "markov"
seed = 3
[training]
steps = 4
batch_size = 4
blas_threads = 1
[pipeline]
micro_batches = 2
[output]
dir = "$tmp/gpt"
checkpoint_every = 4
TOML
deck=$tmp/gpt.toml

run 2 train "$deck"
cp "$tmp/out" "$tmp/plain.log"
check "tiny GPT trains with a checkpoint" status_is 0
ckpt=$tmp/gpt/checkpoints

sample() {  # sample NP ARGS...: stdout in $tmp/text, everything in $tmp/out
  timeout 60 mpirun --oversubscribe --bind-to none -np "$1" "$build/pipetrain" sample "$deck" \
    --resume "$ckpt" "${@:2}" > "$tmp/text" 2> "$tmp/err"
  status=$?
  cat "$tmp/text" "$tmp/err" > "$tmp/out"
}
sample 1 --prompt "1 2 3" --tokens 20 --seed 5
check "sample on 1 rank succeeds" status_is 0
check "it names the checkpoint and the draw" output_has "pipetrain sample: $ckpt/step_00000004 (step 4) on 1 rank; no tokenizer (text is token ids); temperature 1, top-k 0, seed 5"
text > "$tmp/a1"
check "it prints the prompt and 20 ids" bash -c "grep -Eq '^1 2 3( [0-9]+){20}\$' '$tmp/a1'"
sample 1 --prompt "1 2 3" --tokens 20 --seed 5
check "the same seed, the same text" diff <(text) "$tmp/a1"
sample 2 --prompt "1 2 3" --tokens 20 --seed 5
check "2 ranks (a forward-only pipeline) print the 1-rank text" diff <(text) "$tmp/a1"
sample 1 --prompt "1 2 3" --tokens 20 --seed 6
check "another seed, another text" bash -c "! cmp -s '$tmp/text' '$tmp/a1'"
sample 1 --prompt "1 2 3" --tokens 20 --temperature 0
text > "$tmp/g1"
sample 2 --prompt "1 2 3" --tokens 20 --temperature 0 --top-k 3
check "greedy on 2 ranks (top-k 3 changes nothing) equals greedy on 1" diff <(text) "$tmp/g1"

# output.sample_every: samples printed, training bitwise unchanged; the
# sample command reproduces a training sample from that step's checkpoint.
run 2 train "$deck" --set output.sample_every=2 --set output.sample_tokens=8 --set output.dir=\"$tmp/gpt_s\"
check "training with samples succeeds" status_is 0
check "a sample after step 2 and after step 4" \
  bash -c "[ \$(grep -cE '^sample after step [24]: 0( [0-9]+){8}\$' '$tmp/out') -eq 2 ]"
check "same losses with and without samples" diff <(losses "$tmp/out") <(losses "$tmp/plain.log")
check "bitwise the same final state (checkpoint digest)" [ "$(digest 4 "$tmp/out")" = "$(digest 4 "$tmp/plain.log")" ]
grep -E '^sample after step 4: ' "$tmp/out" | sed 's/^sample after step 4: //' > "$tmp/s4"
ckpt=$tmp/gpt_s/checkpoints sample 2 --prompt 0 --tokens 8 --seed 1234  # model.init_seed
check "pipetrain sample prints the training sample of the same step (seed model.init_seed)" diff "$tmp/text" "$tmp/s4"

# Bad inputs: one message each.
sample 1 --prompt "$(seq -s ' ' 0 15) 1"
check "a prompt longer than the context is refused" status_not
check "... naming its length and model.seq_len" output_has "pipetrain: error: --prompt is 17 tokens long (no tokenizer (text is token ids)), longer than the model's context, model.seq_len = 16: shorten it to at most 16 tokens"
check "... once" one_error
"$py" - "$tmp/tok.json" <<'PY'
import json, sys
# A byte-level BPE tokenizer.json of 256 tokens, no merges.
keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
chars, n = {}, 0
for b in range(256):
    if b in keep: chars[b] = chr(b)
    else: chars[b] = chr(256 + n); n += 1
tok = {"version": "1.0", "added_tokens": [], "normalizer": None,
       "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
       "decoder": {"type": "ByteLevel"},
       "model": {"type": "BPE", "vocab": {chars[b]: b for b in range(256)}, "merges": []}}
json.dump(tok, open(sys.argv[1], "w"))
PY
sample 1 --tokenizer "$tmp/tok.json" --prompt "hi"
check "a tokenizer larger than the model is refused" status_not
check "... naming both sizes" output_has "does not fit the model: it has 256 tokens, more than model.vocab_size = 16"
check "... once" one_error
sample 3
check "more ranks than blocks is refused" output_has "pipetrain sample on 3 ranks: the model has 2 transformer blocks (model.blocks)"
check "... on every rank, once" one_error
run 1 train inputs/mlp_small.toml --set training.steps=2 --set output.checkpoint_every=2 --set output.dir=\"$tmp/mlp\"
check "an MLP trains with a checkpoint" status_is 0
run 1 sample inputs/mlp_small.toml --resume "$tmp/mlp/checkpoints"
check "sampling an MLP deck is refused" output_has "model.type = \"mlp\": pipetrain sample generates text with a GPT"
check "... once" one_error
run 1 sample "$deck" --resume "$tmp/mlp/checkpoints"
check "an MLP checkpoint with a GPT deck is refused" output_has "a checkpoint of a model.type = \"mlp\" model, but the deck's model.type is \"gpt\""
check "... once" one_error

# Byte tokens (make_token_file.py byte mode): text in, text out.
printf 'the cat sat on the mat. the dog sat on the log. %.0s' $(seq 1 40) > "$tmp/text.txt"
"$py" tools/make_token_file.py --quiet "$tmp/text.txt" "$tmp/bytes.h5" > /dev/null
sed -e 's/^vocab_size = 16/vocab_size = 256/' -e 's/^type = "markov"/type = "hdf5"/' \
    -e "s|^seed = 3|path = \"$tmp/bytes.h5\"|" -e "s|$tmp/gpt\"|$tmp/bytes\"|" "$deck" > "$tmp/bytes.toml"
run 2 train "$tmp/bytes.toml"
check "a byte-level GPT trains" status_is 0
deck=$tmp/bytes.toml ckpt=$tmp/bytes/checkpoints sample 2 --prompt "the c" --tokens 8 --seed 2
check "sampling it prints the prompt as text" grep -aq '^the c' "$tmp/text"
check "... with the byte tokenizer" output_has "the byte tokenizer (256 tokens)"
check "no process left behind" no_leftovers

echo "test_sample: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
