#!/usr/bin/env bash
# test_sample_bpe.sh: pipetrain's C++ byte-level BPE encoder against Hugging
# Face `tokenizers` (tools/.venv), through `pipetrain sample --ids`.
#   tests/cli/test_sample_bpe.sh BUILD_DIR
# make_token_file.py trains a 512-token BPE on the license texts; a one-block
# GPT trains one step on them (a checkpoint to sample from). For license
# text, whitespace runs, an end-of-text token and accented, CJK and
# punctuation characters, the prompt ids pipetrain prints equal the ids of
# `tokenizers`, and the prompt decodes back to its text.
source "$(dirname "$0")/lib.sh" "$1"
need_tools_python

"$py" tools/make_token_file.py --quiet --out-dir "$tmp/corpus" --vocab-size 512 --eot "<|endoftext|>" \
  /usr/share/common-licenses > "$tmp/out" 2>&1
check "a 512-token BPE and its token file" test -s "$tmp/corpus/tokenizer.json"
cat > "$tmp/gpt.toml" <<TOML
[model]
type = "gpt"
vocab_size = 512
seq_len = 512
d_model = 8
heads = 1
blocks = 1
[data]
type = "hdf5"
path = "$tmp/corpus/train_*.h5"
[training]
steps = 1
batch_size = 1
blas_threads = 1
[pipeline]
micro_batches = 1
[output]
dir = "$tmp/run"
checkpoint_every = 1
TOML
run 1 train "$tmp/gpt.toml"
check "a one-block GPT trains one step" status_is 0

n=0
compare() {  # compare TEXT: pipetrain's prompt ids equal those of tokenizers
  n=$((n + 1))
  printf '%s' "$1" > "$tmp/text$n"
  "$py" - "$tmp/corpus/tokenizer.json" "$tmp/text$n" > "$tmp/hf$n" <<'PY'
import sys
from tokenizers import Tokenizer
ids = Tokenizer.from_file(sys.argv[1]).encode(open(sys.argv[2], encoding="utf-8").read()).ids
print(" ".join(map(str, ids)))
PY
  timeout 60 mpirun --oversubscribe --bind-to none -np 1 "$build/pipetrain" sample "$tmp/gpt.toml" \
    --prompt "$1" --tokens 1 --temperature 0 --ids > "$tmp/ids$n" 2> "$tmp/out"
  # all ids but the generated one
  [ -s "$tmp/hf$n" ] && [ "$(sed 's/ [0-9]*$//' "$tmp/ids$n")" = "$(cat "$tmp/hf$n")" ]
}
round_trip() {  # the prompt printed as text is the text
  timeout 60 mpirun --oversubscribe --bind-to none -np 1 "$build/pipetrain" sample "$tmp/gpt.toml" \
    --prompt "$1" --tokens 1 --temperature 0 > "$tmp/back" 2> "$tmp/out"
  [ "$(head -c "$(printf '%s' "$1" | wc -c)" "$tmp/back")" = "$1" ]
}
gpl=$(head -c 900 /usr/share/common-licenses/GPL-3)
apache=$(tail -c 700 /usr/share/common-licenses/Apache-2.0)
mixed=$'Caf\u00e9 na\u00efve \u2014 \u201cquoted\u201d \u65e5\u672c\u8a9e, x\u00b2 \u00bd  \t\n\n  it\'s   end<|endoftext|>Next'
check "GPL-3 text: the ids of tokenizers" compare "$gpl"
check "Apache-2.0 text: the ids of tokenizers" compare "$apache"
check "accents, CJK, punctuation, whitespace, end-of-text: the ids of tokenizers" compare "$mixed"
check "the prompt decodes to its text" round_trip "$mixed"
check "no process left behind" no_leftovers

echo "test_sample_bpe: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
