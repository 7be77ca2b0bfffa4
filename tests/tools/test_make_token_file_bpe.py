#!/usr/bin/env python3
"""test_make_token_file_bpe.py: the BPE mode of tools/make_token_file.py
(a byte-level BPE tokenizer, a corpus of files, shards) on a real text: the
license texts that Debian's base-files package installs in
/usr/share/common-licenses.

    tools/.venv/bin/python tests/tools/test_make_token_file_bpe.py

Round trip (the tokens decode to the corpus), cutting into pieces does not
change the tokens, determinism (identical bytes), a saved tokenizer gives the
same shards, shard sizes and attributes, the held-out split, input order, and
each bad input's message. Prints one line per test and "N passed, M failed";
exits 1 on failure. The tool runs in this process (main()), so a run costs
well under a second.
"""
import contextlib
import glob
import hashlib
import io
import os
import shutil
import sys
import tempfile
import traceback

import h5py
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import make_token_file as tool  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

LICENSES = "/usr/share/common-licenses"
# Small real texts of the corpus, for the quick cases (about 26 KB together).
SMALL = [os.path.join(LICENSES, n) for n in ("Apache-2.0", "Artistic", "BSD", "CC0-1.0")]
EOT = "<|endoftext|>"


def run(*argv):
    """Runs the tool; returns (status, stdout + stderr)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            status = tool.main([str(a) for a in argv])
        except SystemExit as exc:  # argparse errors
            status = exc.code
    return status, out.getvalue()


def ok(*argv):
    status, text = run(*argv)
    assert status == 0, f"status {status}: {text}"
    return text


def fails(expected, *argv):
    status, text = run(*argv)
    assert status not in (0, None), f"expected a failure, got status {status}: {text}"
    assert expected in text, f"expected {expected!r} in:\n{text}"
    assert text.count("error:") == 1, f"expected one error line:\n{text}"


def shards(directory, split):
    return sorted(glob.glob(os.path.join(directory, f"{split}_*.h5")))


def tokens_of(paths, dataset="tokens"):
    parts = []
    for p in paths:
        with h5py.File(p, "r") as f:
            parts.append(f[dataset][...])
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def file_bytes(directory):
    return {os.path.basename(p): open(p, "rb").read() for p in sorted(glob.glob(os.path.join(directory, "*")))}


def corpus_text(paths):
    return "".join(open(p, encoding="utf-8").read() + EOT for p in paths)


def decode(directory, ids):
    tok = Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))
    return tok.decode([int(i) for i in ids], skip_special_tokens=False)


# ---- the cases ---------------------------------------------------------------

def test_round_trip_and_format(tmp):
    out = os.path.join(tmp, "out")
    text = ok("--out-dir", out, "--vocab-size", 600, "--shard-tokens", 1000, "--quiet", *SMALL)
    assert "training tokens in" in text and "vocab_size 600 (uint16 tokens)" in text, text
    train = shards(out, "train")
    assert len(train) >= 3 and not shards(out, "eval"), train
    ids = tokens_of(train)
    assert decode(out, ids) == corpus_text(SMALL), "the tokens do not decode to the corpus"
    json_bytes = open(os.path.join(out, "tokenizer.json"), "rb").read()
    offset = 0
    for i, path in enumerate(train):
        with h5py.File(path, "r") as f:
            assert f.attrs["format"] == "pipetrain-tokens" and int(f.attrs["format_version"]) == 2
            d = f["tokens"]
            assert d.ndim == 1 and d.dtype == np.uint16, (d.shape, d.dtype)
            assert d.shape[0] == (1000 if i < len(train) - 1 else ids.size - 1000 * i), d.shape
            a = d.attrs
            assert int(a["vocab_size"]) == 600 and a["tokenizer"] == "bpe" and a["split"] == "train"
            assert a["tokenizer_sha256"] == hashlib.sha256(json_bytes).hexdigest()
            assert int(a["shard"]) == i and int(a["token_offset"]) == offset
            assert int(a["eot_id"]) == Tokenizer.from_str(json_bytes.decode()).token_to_id(EOT)
            assert bytes(f["tokenizer_json"][...]) == json_bytes, "stored tokenizer differs from tokenizer.json"
            offset += d.shape[0]
    assert int(ids.max()) < 600


def test_pieces_give_the_tokens_of_whole_files(tmp):
    a, b = os.path.join(tmp, "a"), os.path.join(tmp, "b")
    ok("--out-dir", a, "--vocab-size", 500, "--quiet", *SMALL)
    saved = tool.BLOCK_BYTES
    tool.BLOCK_BYTES = 97  # many pieces, cut at line starts
    try:
        ok("--out-dir", b, "--vocab-size", 500, "--quiet", *SMALL)
    finally:
        tool.BLOCK_BYTES = saved
    assert file_bytes(a) == file_bytes(b), "reading in small blocks changed the tokenizer or the tokens"
    tok = Tokenizer.from_file(os.path.join(a, "tokenizer.json"))
    want = []
    for p in SMALL:
        want += tok.encode(open(p, encoding="utf-8").read(), add_special_tokens=False).ids + [tok.token_to_id(EOT)]
    assert tokens_of(shards(a, "train")).tolist() == want, "tokens differ from encoding each file whole"


def test_deterministic_and_saved_tokenizer_gives_the_same_shards(tmp):
    a, b, c = (os.path.join(tmp, n) for n in "abc")
    args = ["--vocab-size", 700, "--shard-tokens", 4000, "--eval-fraction", 0.1, "--quiet", LICENSES]
    ok("--out-dir", a, *args)
    ok("--out-dir", b, *args)
    assert file_bytes(a) == file_bytes(b), "two runs gave different bytes"
    ok("--out-dir", c, "--tokenizer", os.path.join(a, "tokenizer.json"), "--vocab-size", 700,
       "--shard-tokens", 4000, "--eval-fraction", 0.1, "--quiet", LICENSES)
    assert file_bytes(a) == file_bytes(c), "the saved tokenizer gave other shards"


def test_held_out_split_is_the_end_of_the_corpus(tmp):
    out = os.path.join(tmp, "out")
    ok("--out-dir", out, "--vocab-size", 600, "--eval-fraction", 0.25, "--shard-tokens", 3000, "--quiet", *SMALL)
    train, held = tokens_of(shards(out, "train")), tokens_of(shards(out, "eval"))
    assert train.size > 0 and held.size > 0
    train_text, held_text = decode(out, train), decode(out, held)
    assert train_text + held_text == corpus_text(SMALL)
    total = sum(os.path.getsize(p) for p in SMALL)
    start = len(train_text.replace(EOT, "").encode("utf-8"))
    assert start >= total - round(0.25 * total), (start, total)
    assert train_text.endswith("\n") and train_text[-2].isalnum() and held_text[0].isalnum(), \
        "the split is not at a line start"
    with h5py.File(shards(out, "eval")[0], "r") as f:
        assert f["tokens"].attrs["split"] == "eval" and int(f["tokens"].attrs["token_offset"]) == 0


def test_inputs_folders_patterns_order_and_duplicates(tmp):
    corpus = os.path.join(tmp, "corpus")
    os.makedirs(os.path.join(corpus, "sub"))
    os.makedirs(os.path.join(corpus, ".hidden"))
    texts = {"b.txt": "Second file.\n", "B.txt": "First: byte order puts B before b.\n",
             "sub/c.txt": "Third, in a folder.\n", ".skip.txt": "hidden\n", ".hidden/x.txt": "hidden\n"}
    for name, text in texts.items():
        with open(os.path.join(corpus, name), "w", encoding="utf-8") as f:
            f.write(text)
    os.symlink(os.path.join(corpus, "b.txt"), os.path.join(corpus, "sub", "link.txt"))
    out = os.path.join(tmp, "out")
    # The folder, then a pattern matching files already read: each file once.
    ok("--out-dir", out, "--vocab-size", 300, "--quiet", corpus, os.path.join(corpus, "*.txt"))
    want = "".join(texts[n] + EOT for n in ("B.txt", "b.txt", "sub/c.txt"))
    assert decode(out, tokens_of(shards(out, "train"))) == want


def test_dtype_follows_the_vocabulary(tmp):
    out = os.path.join(tmp, "out")
    ok("--out-dir", out, "--vocab-size", 256, "--eot", "", "--quiet", SMALL[2])
    with h5py.File(shards(out, "train")[0], "r") as f:
        assert f["tokens"].dtype == np.uint8 and int(f["tokens"].attrs["eot_id"]) == -1
    assert decode(out, tokens_of(shards(out, "train"))) == open(SMALL[2], encoding="utf-8").read()
    assert tool.token_dtype(256) == np.uint8 and tool.token_dtype(257) == np.uint16
    assert tool.token_dtype(65536) == np.uint16 and tool.token_dtype(65537) == np.uint32


def test_earlier_shards_are_replaced(tmp):
    out = os.path.join(tmp, "out")
    ok("--out-dir", out, "--vocab-size", 400, "--shard-tokens", 500, "--quiet", *SMALL)
    many = len(shards(out, "train"))
    with open(os.path.join(out, "notes.txt"), "w") as f:
        f.write("the user's file\n")
    text = ok("--out-dir", out, "--vocab-size", 400, "--quiet", *SMALL)
    assert many > 1 and len(shards(out, "train")) == 1, (many, shards(out, "train"))
    assert f"replaced {many} shard(s) of an earlier run" in text, text
    assert os.path.exists(os.path.join(out, "notes.txt")), "a file that is not the tool's was removed"
    assert not [n for n in os.listdir(out) if n.startswith(".")], "temporary files left"


def test_bad_inputs(tmp):
    out = os.path.join(tmp, "out")
    empty = os.path.join(tmp, "empty")
    os.makedirs(empty)
    fails("the inputs hold no files", "--out-dir", out, "--vocab-size", 300, empty)
    for n in ("a.txt", "b.txt"):
        open(os.path.join(empty, n), "w").close()
    fails("the corpus is empty: 2 file(s), 0 bytes of text", "--out-dir", out, "--vocab-size", 300, empty)
    fails(f"input '{tmp}/nope.txt' does not exist", "--out-dir", out, "--vocab-size", 300, f"{tmp}/nope.txt")
    fails(f"input pattern '{tmp}/*.nope' matches no file", "--out-dir", out, "--vocab-size", 300, f"{tmp}/*.nope")
    binary = os.path.join(tmp, "binary.dat")
    with open(binary, "wb") as f:
        f.write(b"text first\n" + bytes([0xff, 0xfe]) + b"\n")
    fails(f"input file '{binary}' is not UTF-8 text (bad byte at offset 11)", "--out-dir", out,
          "--vocab-size", 300, binary)
    fails("--vocab-size must be at least 257 (the 256 byte symbols and <|endoftext|>), not 100",
          "--out-dir", out, "--vocab-size", 100, SMALL[2])
    # A saved tokenizer larger than the model's vocabulary.
    big = os.path.join(tmp, "big")
    ok("--out-dir", big, "--vocab-size", 800, "--quiet", *SMALL)
    fails(f"tokenizer '{big}/tokenizer.json' has 800 tokens, more than --vocab-size 512 (the model's vocab_size)",
          "--out-dir", out, "--tokenizer", f"{big}/tokenizer.json", "--vocab-size", 512, SMALL[2])
    fails(f"tokenizer '{big}/tokenizer.json' has no token '<eos>' to end each document",
          "--out-dir", out, "--tokenizer", f"{big}/tokenizer.json", "--eot", "<eos>", SMALL[2])
    not_json = os.path.join(tmp, "not.json")
    with open(not_json, "w") as f:
        f.write("{ not json")
    fails(f"tokenizer '{not_json}' is not a tokenizer.json that Hugging Face tokenizers can read",
          "--out-dir", out, "--tokenizer", not_json, SMALL[2])
    fails("each part needs at least 2", "--out-dir", out, "--vocab-size", 300, "--eval-fraction", 0.001,
          "--quiet", SMALL[2])
    fails("--eval-output is for byte mode", "--out-dir", out, "--vocab-size", 300, "--eval-fraction", 0.1,
          "--eval-output", "x.h5", SMALL[2])
    fails("--out-dir needs --vocab-size V (train a tokenizer) or --tokenizer FILE", "--out-dir", out, SMALL[2])
    fails("byte mode takes INPUT OUTPUT.h5", SMALL[0], SMALL[1], "x.h5")
    assert not os.path.exists(out) or not os.listdir(out), f"a failed run left files: {os.listdir(out)}"


def main():
    if not os.path.isdir(LICENSES):
        print(f"FAIL {LICENSES} is missing (Debian's base-files installs it)\n0 passed, 1 failed")
        sys.exit(1)
    tests = [(k, v) for k, v in globals().items() if k.startswith("test_") and callable(v)]
    passed = failed = 0
    for name, fn in tests:
        tmp = tempfile.mkdtemp(prefix="pt_bpe_")
        try:
            fn(tmp)
            passed += 1
            print(f"ok   {name}")
        except Exception:  # noqa: BLE001 - report every failure and go on
            failed += 1
            print(f"FAIL {name}\n{traceback.format_exc()}")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
