#!/usr/bin/env bash
# test_make_token_file.sh: tools/make_token_file.py end to end.
#   tests/tools/test_make_token_file.sh
# Runs the tool with tools/.venv/bin/python (scripts/setup-tools-venv.sh) on a
# small text, checks the written token values (= the bytes) and attributes,
# the train/eval split, and that bad inputs exit non-zero with a message.
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
py=tools/.venv/bin/python
tool=tools/make_token_file.py
if [ ! -x "$py" ]; then
  echo "FAIL $py missing: run scripts/setup-tools-venv.sh"
  echo "0 passed, 1 failed"
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0

run() {  # run ARGS... : runs the tool, output in $tmp/out, status in $status
  "$py" "$tool" "$@" > "$tmp/out" 2>&1
  status=$?
}

check() {  # check NAME CONDITION-COMMAND...
  local name=$1; shift
  if "$@"; then passed=$((passed + 1)); echo "ok   $name"
  else failed=$((failed + 1)); echo "FAIL $name"; sed 's/^/     | /' "$tmp/out" | tail -20; fi
}
output_has() { grep -qF -- "$1" "$tmp/out"; }
status_is() { [ "$status" -eq "$1" ]; }
status_not_zero() { [ "$status" -ne 0 ]; }
no_file() { [ ! -e "$1" ]; }
no_temp_files() { [ -z "$(find "$tmp" -name '.*.tmp-*')" ]; }

# pycheck H5 DATASET EXPECTED-BYTES-FILE START END SPLIT : the dataset holds
# bytes START..END-1 of the file, as uint8, with the expected attributes.
# Output in $tmp/out, status in $status.
pycheck() {
  "$py" - "$@" > "$tmp/out" 2>&1 <<'EOF'
import sys, h5py, numpy as np
h5, name, src, start, end, split = sys.argv[1:7]
start, end = int(start), int(end)
want = np.frombuffer(open(src, "rb").read(), dtype=np.uint8)[start:end]
with h5py.File(h5, "r") as f:
    d = f[name]
    got = d[...]
    assert d.ndim == 1, d.shape
    assert d.dtype == np.uint8, d.dtype
    assert got.shape == want.shape, (got.shape, want.shape)
    assert np.array_equal(got, want), "values differ from the bytes"
    a = d.attrs
    assert int(a["vocab_size"]) == 256, a["vocab_size"]
    tok = a["tokenizer"]; tok = tok.decode() if isinstance(tok, bytes) else tok
    assert tok == "bytes", tok
    s = a["source"]; s = s.decode() if isinstance(s, bytes) else s
    assert s == src.rsplit("/", 1)[-1], s
    sp = a["split"]; sp = sp.decode() if isinstance(sp, bytes) else sp
    assert sp == split, sp
    assert int(a["source_offset"]) == start, a["source_offset"]
print("checked", h5, got.size, "tokens")
EOF
  status=$?
}

# A small text with multi-byte UTF-8 and a few control bytes.
printf 'The quick brown fox jumps over the lazy dog.\nZw\xc3\xb6lf Boxk\xc3\xa4mpfer \xe2\x82\xac\t\x00\x01\xff\n' > "$tmp/small.txt"
for i in $(seq 1 20); do echo "line $i of a longer text for the split" >> "$tmp/small.txt"; done
n=$(stat -c %s "$tmp/small.txt")

# 1. Whole file -> one dataset.
run "$tmp/small.txt" "$tmp/all.h5"
check "writes a token file" status_is 0
check "reports the token count" output_has "$tmp/all.h5: $n tokens"
pycheck "$tmp/all.h5" tokens "$tmp/small.txt" 0 "$n" all
check "tokens are the bytes, uint8, with attributes" status_is 0

# 2. Another dataset name.
run "$tmp/small.txt" "$tmp/named.h5" --dataset ids
check "--dataset writes that name" status_is 0
pycheck "$tmp/named.h5" ids "$tmp/small.txt" 0 "$n" all
check "--dataset values and attributes" status_is 0

# 3. Train/eval split: the last 10% (rounded) of the bytes go to the eval file.
n_eval=$("$py" -c "print(int(round($n * 0.1)))")
n_train=$((n - n_eval))
run "$tmp/small.txt" "$tmp/train.h5" --eval-fraction 0.1 --eval-output "$tmp/eval.h5"
check "split writes both files" status_is 0
check "split reports both counts" output_has "$n_train tokens (train)"
pycheck "$tmp/train.h5" tokens "$tmp/small.txt" 0 "$n_train" train
check "train part is the first bytes" status_is 0
pycheck "$tmp/eval.h5" tokens "$tmp/small.txt" "$n_train" "$n" eval
check "eval part is the last bytes" status_is 0

# 4. Overwriting an existing output replaces it (atomically, no temp left).
run "$tmp/small.txt" "$tmp/all.h5"
check "overwrite succeeds" status_is 0
check "no temporary files left behind" no_temp_files

# 5. Errors: non-zero exit, one clear line, no output written.
run "$tmp/missing.txt" "$tmp/missing.h5"
check "missing input exits non-zero" status_not_zero
check "missing input message" output_has "input file '$tmp/missing.txt' does not exist"
check "missing input writes nothing" no_file "$tmp/missing.h5"

: > "$tmp/empty.txt"
run "$tmp/empty.txt" "$tmp/empty.h5"
check "empty input exits non-zero" status_not_zero
check "empty input message" output_has "is empty: no tokens to write"
check "empty input writes nothing" no_file "$tmp/empty.h5"

run "$tmp/small.txt" "$tmp/x.h5" --eval-fraction 0.1
check "--eval-fraction without --eval-output exits non-zero" status_not_zero
check "--eval-fraction without --eval-output message" output_has "--eval-fraction and --eval-output go together"

run "$tmp/small.txt" "$tmp/x.h5" --eval-fraction 1.5 --eval-output "$tmp/y.h5"
check "bad fraction exits non-zero" status_not_zero
check "bad fraction message" output_has "--eval-fraction must be between 0 and 1"

printf 'abc' > "$tmp/tiny.txt"
run "$tmp/tiny.txt" "$tmp/x.h5" --eval-fraction 0.1 --eval-output "$tmp/y.h5"
check "split too small exits non-zero" status_not_zero
check "split too small message" output_has "each part needs at least 2"
check "split too small writes nothing" no_file "$tmp/x.h5"

run "$tmp/small.txt" "$tmp/no/such/dir/x.h5"
check "missing output directory exits non-zero" status_not_zero
check "missing output directory message" output_has "output directory '$tmp/no/such/dir' does not exist"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
