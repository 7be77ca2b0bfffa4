#!/usr/bin/env python3
"""make_token_file.py: turn text into HDF5 token files for pipetrain.

Byte tokens, one file (every byte is a token):

    tools/.venv/bin/python tools/make_token_file.py INPUT OUTPUT.h5 [--dataset tokens]
        [--eval-fraction 0.1 --eval-output EVAL.h5]

Byte-level BPE (Hugging Face tokenizers), a corpus of many files, in shards:

    tools/.venv/bin/python tools/make_token_file.py --out-dir DIR
        (--vocab-size V | --tokenizer tokenizer.json) INPUT... [--eval-fraction 0.1]
        [--shard-tokens N] [--eot TOKEN] [--dataset tokens] [--quiet]

The BPE mode is described after the byte mode, below; docs/data.md has both
formats, the shards and how pipetrain reads them.

Byte mode

Every byte of INPUT (text or binary) is one token, so the vocabulary is the
256 byte values: use model.vocab_size = 256 (or more). The tokens are written
as a 1-D uint8 dataset (default name "tokens"); pipetrain reads any 1-D
integer dataset and converts it, and uint8 is the smallest type that holds a
byte. The dataset carries the attributes vocab_size = 256, tokenizer =
"bytes", source (INPUT's file name), split ("all", "train" or "eval") and
source_offset (index in INPUT of the dataset's first byte).

With --eval-fraction F and --eval-output EVAL.h5, the last F of the bytes go
to EVAL.h5 (for data.eval_path) and the rest to OUTPUT.h5 (data.path); the
split is contiguous, so no evaluation window overlaps a training window.

A deck using the files:

    [model]
    type = "gpt"
    vocab_size = 256
    [data]
    type = "hdf5"
    path = "OUTPUT.h5"
    eval_path = "EVAL.h5"

Files are written under a temporary name and renamed into place, so a reader
never sees a half-written file. Errors (missing or empty input, a bad
fraction, an unwritable output) print one line and exit with status 1.

BPE mode

With --vocab-size V the tool trains a byte-level BPE tokenizer of at most V
tokens (256 byte symbols, the end-of-text token <|endoftext|>, and merges
learnt from the training part of the corpus); with --tokenizer it uses a saved
tokenizer.json instead (refused when it has more than --vocab-size tokens, if
given). INPUTs are files, folders (every file below them, hidden ones
skipped, in byte order of their paths) and glob patterns (matches in byte
order); a file reached twice is read once. Each file is one document, UTF-8
text, followed by the end-of-text token (--eot; "" for none).

The corpus is streamed: files are read in blocks and cut into pieces at line
starts (a newline with a letter or digit on both sides), where a byte-level
BPE splits its input anyway, so the tokenizer and the tokens equal those of
reading each file whole. Progress goes to stderr. The tool writes, in DIR:

    tokenizer.json        the tokenizer, byte for byte as stored in the shards
    train_00000.h5 ...    training tokens, --shard-tokens tokens per file (the
                          last one shorter); data.path = "DIR/train_*.h5"
    eval_00000.h5 ...     with --eval-fraction F: the held-out tokens, from the
                          first line start (or file) at or after the last F of
                          the corpus bytes; data.eval_path = "DIR/eval_*.h5"

Shards hold the smallest unsigned type for the vocabulary (uint8 up to 256
tokens, uint16 up to 65536, else uint32), the tokenizer (dataset
tokenizer_json: the bytes of tokenizer.json) and its SHA-256 (attribute
tokenizer_sha256, which data.tokenizer = "DIR/tokenizer.json" checks). Shards
of an earlier run in DIR are replaced. The same inputs and options give
byte-identical files. Errors (no input, an empty corpus, a file that is not
UTF-8, a tokenizer larger than --vocab-size, ...) print one line and exit with
status 1.
"""
import argparse
import codecs
import glob
import hashlib
import json
import os
import re
import shutil
import sys
import time

try:
    import h5py
    import numpy as np
except ImportError as exc:  # pragma: no cover - depends on the environment
    sys.exit(f"make_token_file.py: error: {exc.name} is missing; run scripts/setup-tools-venv.sh "
             "and use tools/.venv/bin/python")

VOCAB_SIZE = 256
MIN_TOKENS = 2  # one window of model.seq_len + 1 >= 2 tokens
FORMAT = "pipetrain-tokens"  # file attributes format and format_version (docs/data.md)
FORMAT_VERSION = 2


class UserError(Exception):
    """A problem with the command line or the input; reported in one line."""


def read_bytes(path):
    if not os.path.exists(path):
        raise UserError(f"input file '{path}' does not exist")
    if os.path.isdir(path):
        raise UserError(f"input '{path}' is a directory, not a file")
    try:
        tokens = np.fromfile(path, dtype=np.uint8)
    except OSError as exc:
        raise UserError(f"cannot read input file '{path}': {exc.strerror or exc}") from exc
    if tokens.size == 0:
        raise UserError(f"input file '{path}' is empty: no tokens to write")
    return tokens


def split_tokens(tokens, fraction):
    """Returns (train, eval, eval_start): the last `fraction` of the tokens are eval."""
    n_eval = int(round(tokens.size * fraction))
    n_train = tokens.size - n_eval
    if n_eval < MIN_TOKENS or n_train < MIN_TOKENS:
        raise UserError(f"--eval-fraction {fraction} splits {tokens.size} tokens into {n_train} "
                        f"training and {n_eval} evaluation tokens; each part needs at least "
                        f"{MIN_TOKENS}")
    return tokens[:n_train], tokens[n_train:], n_train


def write_atomic(path, dataset, tokens, source, split, offset):
    """Writes `tokens` to `path` via a temporary file in the same directory."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UserError(f"output directory '{directory}' does not exist")
    tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp-{os.getpid()}")
    try:
        with h5py.File(tmp, "w") as f:
            dset = f.create_dataset(dataset, data=tokens, dtype=np.uint8)
            dset.attrs["vocab_size"] = np.int64(VOCAB_SIZE)
            dset.attrs["tokenizer"] = "bytes"
            dset.attrs["source"] = source
            dset.attrs["split"] = split
            dset.attrs["source_offset"] = np.int64(offset)
            f.attrs["format"] = FORMAT
            f.attrs["format_version"] = np.int64(FORMAT_VERSION)
        os.replace(tmp, path)
    except OSError as exc:
        raise UserError(f"cannot write '{path}': {exc.strerror or exc}") from exc
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


# ---- BPE mode: a corpus of files, a tokenizer, shards -----------------------

EOT = "<|endoftext|>"
BLOCK_BYTES = 1 << 20          # read size; pieces are about this long
ENCODE_BATCH_CHARS = 8 << 20   # text encoded per encode_batch call
DEFAULT_SHARD_TOKENS = 50_000_000
SHARD_DIGITS = 5               # train_00000.h5: byte order = shard order
SHARD_NAME = re.compile(r"^(train|eval)_[0-9]{5}\.h5$")
TOKENIZER_FILE = "tokenizer.json"
GLOB_CHARS = re.compile(r"[*?[]")


def _bytes_key(path):
    return os.fsencode(path)


def collect_inputs(inputs):
    """The files that the INPUT arguments name, in reading order, each once.

    A file is itself; a folder is every regular file below it whose path has
    no hidden (dot) component below the folder; a glob pattern is its matches
    (folders among them as folders). Folder contents and matches are in byte
    order of their paths. A file reached again (also through a symbolic link)
    keeps its first place.
    """
    files, seen = [], set()

    def add(path):
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            files.append(path)

    def add_folder(folder):
        found = []
        for root, dirs, names in os.walk(folder, followlinks=False):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            found += [os.path.join(root, n) for n in names
                      if not n.startswith(".") and os.path.isfile(os.path.join(root, n))]
        for path in sorted(found, key=_bytes_key):
            add(path)

    for arg in inputs:
        if os.path.isdir(arg):
            add_folder(arg)
        elif os.path.isfile(arg):
            add(arg)
        elif os.path.exists(arg):
            raise UserError(f"input '{arg}' is not a regular file or a folder")
        elif GLOB_CHARS.search(arg):
            matches = sorted(glob.glob(arg, recursive=True), key=_bytes_key)
            if not matches:
                raise UserError(f"input pattern '{arg}' matches no file")
            for m in matches:
                if os.path.isdir(m):
                    add_folder(m)
                elif os.path.isfile(m):
                    add(m)
        else:
            raise UserError(f"input '{arg}' does not exist (no file, folder or glob match)")
    if not files:
        raise UserError("the inputs hold no files: " + " ".join(inputs))
    return files


def is_cut(text, i):
    """Whether text may be cut before index i: text[i - 1] is a newline, with
    a letter or digit on both sides of it. GPT-2's pre-tokenizer pattern
    (byte-level BPE) makes that newline a pre-token of its own whether or not
    the text goes on after it, and starts the next pre-token at text[i], so
    pieces cut there encode to the tokens of the whole text."""
    return 2 <= i < len(text) and text[i - 1] == "\n" and text[i].isalnum() and text[i - 2].isalnum()


def last_line_start(text):
    """The last index where `text` may be cut (is_cut); 0 when there is none."""
    end = len(text) - 1
    while True:
        i = text.rfind("\n", 0, end)
        if i < 0:
            return 0
        if is_cut(text, i + 1):
            return i + 1
        end = i


def first_line_start(text, begin):
    """The first index >= begin where `text` may be cut; None when there is none."""
    i = text.find("\n", max(begin - 1, 0))
    while 0 <= i < len(text) - 1:
        if is_cut(text, i + 1):
            return i + 1
        i = text.find("\n", i + 1)
    return None


def file_pieces(path):
    """The UTF-8 text of `path` as pieces cut at line starts (last_line_start),
    reading BLOCK_BYTES at a time."""
    block_bytes = BLOCK_BYTES
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    pending, consumed = "", 0
    try:
        with open(path, "rb") as f:
            while True:
                block = f.read(block_bytes)
                buffered = len(decoder.getstate()[0])
                try:
                    pending += decoder.decode(block, final=not block)
                except UnicodeDecodeError as exc:
                    raise UserError(f"input file '{path}' is not UTF-8 text (bad byte at offset "
                                    f"{consumed - buffered + exc.start}); give text files only") from exc
                consumed += len(block)
                if not block:
                    break
                cut = last_line_start(pending)
                if cut > 0:
                    yield pending[:cut]
                    pending = pending[cut:]
    except OSError as exc:
        raise UserError(f"cannot read input file '{path}': {exc.strerror or exc}") from exc
    if pending:
        yield pending


class Progress:
    """Progress of a pass over the corpus on stderr: a line rewritten in
    place on a terminal, else a line every 10%."""

    def __init__(self, phase, total_bytes, quiet):
        self.phase, self.total, self.quiet = phase, max(total_bytes, 1), quiet
        self.done = self.files = 0
        self.start = self.last = time.monotonic()
        self.tty = sys.stderr.isatty()
        self.decile = 0

    def _line(self):
        mb = 1 << 20
        return (f"{self.phase}: {100.0 * self.done / self.total:5.1f}% "
                f"({self.done / mb:.1f} of {self.total / mb:.1f} MiB, {self.files} files, "
                f"{time.monotonic() - self.start:.1f} s)")

    def update(self, nbytes, files=0):
        self.done += nbytes
        self.files += files
        if self.quiet:
            return
        now = time.monotonic()
        if self.tty and now - self.last >= 0.5:
            sys.stderr.write("\r" + self._line())
            sys.stderr.flush()
            self.last = now
        elif not self.tty and self.done * 10 // self.total > self.decile:
            self.decile = self.done * 10 // self.total
            if self.decile < 10:
                print(self._line(), file=sys.stderr)

    def finish(self, note=""):
        if not self.quiet:
            sys.stderr.write(("\r" if self.tty else "") + self._line() + (f"; {note}" if note else "") + "\n")
            sys.stderr.flush()


def corpus_pieces(files, total_bytes, eval_fraction, progress):
    """Yields (split, text) for the corpus in order, and (split, None) after
    each file (its end-of-text). The held-out part ("eval") starts at the
    first cut (is_cut) or file start at or after byte
    total_bytes - round(total_bytes * eval_fraction) of the corpus."""
    target = total_bytes - round(total_bytes * eval_fraction) if eval_fraction else None
    done, split = 0, "train"
    for path in files:
        for piece in file_pieces(path):
            nbytes = len(piece.encode("utf-8"))
            if split == "train" and target is not None and done >= target:
                split = "eval"
            if split == "train" and target is not None and done + nbytes > target:
                offset = len(piece.encode("utf-8")[:target - done].decode("utf-8", errors="ignore"))
                cut = first_line_start(piece, offset)
                if cut is not None:
                    yield "train", piece[:cut]
                    split = "eval"
                    piece = piece[cut:]
            yield split, piece
            done += nbytes
            progress.update(nbytes)
        yield split, None
        progress.update(0, files=1)


def new_bpe_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return tok


def train_tokenizer(files, total_bytes, args):
    """A byte-level BPE of at most args.vocab_size tokens, trained on the
    training part of the corpus; returns its tokenizer.json bytes."""
    from tokenizers import pre_tokenizers, trainers
    specials = [args.eot] if args.eot else []
    trainer = trainers.BpeTrainer(vocab_size=args.vocab_size, show_progress=False, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    progress = Progress("train tokenizer", total_bytes, args.quiet)

    def texts():  # the training part, which comes first
        for split, text in corpus_pieces(files, total_bytes, args.eval_fraction, progress):
            if split != "train":
                return
            if text:
                yield text

    tok = new_bpe_tokenizer()
    tok.train_from_iterator(texts(), trainer=trainer)
    progress.finish(f"{tok.get_vocab_size()} tokens")
    return tok.to_str().encode("utf-8")


def load_tokenizer(text_bytes, where):
    from tokenizers import Tokenizer
    try:
        return Tokenizer.from_str(text_bytes.decode("utf-8"))
    except Exception as exc:  # tokenizers raises plain Exceptions for bad JSON
        raise UserError(f"{where} is not a tokenizer.json that Hugging Face tokenizers can read: {exc}") from exc


def vocabulary_size(tok):
    """Ids are 0..size-1: one more than the largest id (added tokens included)."""
    return max(tok.get_vocab(with_added_tokens=True).values()) + 1


def token_dtype(vocab_size):
    if vocab_size <= 1 << 8:
        return np.uint8
    if vocab_size <= 1 << 16:
        return np.uint16
    return np.uint32


class ShardWriter:
    """Writes one split's tokens as DIR/<split>_NNNNN.h5 files of
    shard_tokens tokens each (the last shorter), holding at most one shard in
    memory."""

    def __init__(self, directory, split, settings):
        self.directory, self.split, self.s = directory, split, settings
        self.parts, self.count, self.index, self.offset = [], 0, 0, 0
        self.paths = []

    def add(self, ids):
        while ids.size:
            take = ids[:self.s["shard_tokens"] - self.count]
            self.parts.append(take.astype(self.s["dtype"]))
            self.count += take.size
            ids = ids[take.size:]
            if self.count == self.s["shard_tokens"]:
                self.flush()

    def flush(self):
        if self.count == 0:
            return
        if self.index >= 10 ** SHARD_DIGITS:
            raise UserError(f"more than {10 ** SHARD_DIGITS} {self.split} shards: raise --shard-tokens")
        name = f"{self.split}_{self.index:0{SHARD_DIGITS}d}.h5"
        path = os.path.join(self.directory, name)
        s = self.s
        with h5py.File(path, "w") as f:
            f.attrs["format"] = FORMAT
            f.attrs["format_version"] = np.int64(FORMAT_VERSION)
            d = f.create_dataset(s["dataset"], data=np.concatenate(self.parts))
            d.attrs["vocab_size"] = np.int64(s["vocab_size"])
            d.attrs["tokenizer"] = s["kind"]
            d.attrs["tokenizer_sha256"] = s["sha256"]
            d.attrs["eot_id"] = np.int64(s["eot_id"])
            d.attrs["split"] = self.split
            d.attrs["shard"] = np.int64(self.index)
            d.attrs["token_offset"] = np.int64(self.offset)
            d.attrs["source"] = s["source"]
            f.create_dataset("tokenizer_json", data=np.frombuffer(s["tokenizer_json"], dtype=np.uint8))
        self.paths.append(path)
        self.offset += self.count
        self.index += 1
        self.parts, self.count = [], 0


def encode_corpus(tok, files, total_bytes, args, writers, eot_id):
    """Encodes the corpus piece by piece into the writers; returns the token
    count of each split."""
    progress = Progress("encode", total_bytes, args.quiet)
    counts = {"train": 0, "eval": 0}
    batch, batch_chars = [], 0  # (split, text or None)

    def flush():
        texts = [text for _, text in batch if text]
        encoded = iter(tok.encode_batch(texts, add_special_tokens=False)) if texts else iter(())
        for split, text in batch:
            if text:
                ids = np.asarray(next(encoded).ids, dtype=np.int64)
            elif text is None and eot_id >= 0:
                ids = np.array([eot_id], dtype=np.int64)
            else:
                continue
            writers[split].add(ids)
            counts[split] += ids.size
        batch.clear()

    for split, text in corpus_pieces(files, total_bytes, args.eval_fraction, progress):
        batch.append((split, text))
        batch_chars += len(text) if text else 0
        if batch_chars >= ENCODE_BATCH_CHARS:
            flush()
            batch_chars = 0
    flush()
    progress.finish()
    return counts


def replace_outputs(tmp_dir, out_dir):
    """Moves the new files from tmp_dir into out_dir, first removing the shards
    and tokenizer.json of an earlier run there; returns how many were removed."""
    removed = 0
    for name in sorted(os.listdir(out_dir)):
        if SHARD_NAME.match(name) or name == TOKENIZER_FILE:
            os.remove(os.path.join(out_dir, name))
            removed += name != TOKENIZER_FILE
    for name in sorted(os.listdir(tmp_dir)):
        os.replace(os.path.join(tmp_dir, name), os.path.join(out_dir, name))
    return removed


def run_bpe(args):
    files = collect_inputs(args.inputs)
    total_bytes = sum(os.path.getsize(f) for f in files)
    if total_bytes == 0:
        raise UserError(f"the corpus is empty: {len(files)} file(s), 0 bytes of text")
    try:
        import tokenizers  # noqa: F401
    except ImportError as exc:
        raise UserError("the Python package 'tokenizers' is missing; run scripts/setup-tools-venv.sh "
                        "(make tools) and use tools/.venv/bin/python") from exc

    if args.tokenizer:
        try:
            with open(args.tokenizer, "rb") as f:
                tokenizer_json = f.read()
        except OSError as exc:
            raise UserError(f"cannot read tokenizer '{args.tokenizer}': {exc.strerror or exc}") from exc
        tok = load_tokenizer(tokenizer_json, f"tokenizer '{args.tokenizer}'")
        size = vocabulary_size(tok)
        if args.vocab_size is not None and size > args.vocab_size:
            raise UserError(f"tokenizer '{args.tokenizer}' has {size} tokens, more than --vocab-size "
                            f"{args.vocab_size} (the model's vocab_size); use a larger model.vocab_size "
                            "and --vocab-size, or a smaller tokenizer")
        if args.eot and tok.token_to_id(args.eot) is None:
            raise UserError(f"tokenizer '{args.tokenizer}' has no token '{args.eot}' to end each document; "
                            "name one of its tokens with --eot TOKEN, or give --eot '' for none")
    else:
        tokenizer_json = train_tokenizer(files, total_bytes, args)
        tok = load_tokenizer(tokenizer_json, "the trained tokenizer")
        size = vocabulary_size(tok)
        if size > args.vocab_size:  # BpeTrainer never does this; a guard for the promise made
            raise UserError(f"the trained tokenizer has {size} tokens, more than --vocab-size {args.vocab_size}")
    model_kind = json.loads(tokenizer_json.decode("utf-8")).get("model", {}).get("type", "unknown")
    settings = {
        "dataset": args.dataset, "vocab_size": size, "dtype": token_dtype(size),
        "kind": str(model_kind).lower(), "sha256": hashlib.sha256(tokenizer_json).hexdigest(),
        "eot_id": tok.token_to_id(args.eot) if args.eot else -1, "shard_tokens": args.shard_tokens,
        "tokenizer_json": tokenizer_json, "source": " ".join(args.inputs)[:2000],
    }

    out_dir = args.out_dir
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create output directory '{out_dir}': {exc.strerror or exc}") from exc
    tmp_dir = os.path.join(out_dir, f".make_token_file.tmp-{os.getpid()}")
    try:
        os.makedirs(tmp_dir)
        with open(os.path.join(tmp_dir, TOKENIZER_FILE), "wb") as f:
            f.write(tokenizer_json)
        writers = {split: ShardWriter(tmp_dir, split, settings) for split in ("train", "eval")}
        counts = encode_corpus(tok, files, total_bytes, args, writers, settings["eot_id"])
        for w in writers.values():
            w.flush()
        if args.eval_fraction and (counts["train"] < MIN_TOKENS or counts["eval"] < MIN_TOKENS):
            raise UserError(f"--eval-fraction {args.eval_fraction} splits the corpus into {counts['train']} "
                            f"training and {counts['eval']} held-out tokens; each part needs at least "
                            f"{MIN_TOKENS} (the held-out part starts at a line start, where a newline "
                            "has a letter or digit on both sides, or at a file)")
        if counts["train"] < MIN_TOKENS:
            raise UserError(f"the corpus gives {counts['train']} token(s); at least {MIN_TOKENS} are needed")
        removed = replace_outputs(tmp_dir, out_dir)
    except OSError as exc:
        raise UserError(f"cannot write to '{out_dir}': {exc.strerror or exc}") from exc
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)

    shards = {k: len(w.paths) for k, w in writers.items()}
    dtype = np.dtype(settings["dtype"]).name
    print(f"{out_dir}: {counts['train']} training tokens in {shards['train']} shard(s) train_*.h5"
          + (f", {counts['eval']} held-out tokens in {shards['eval']} shard(s) eval_*.h5" if args.eval_fraction else "")
          + f"; {len(files)} files, {total_bytes} bytes")
    print(f"{os.path.join(out_dir, TOKENIZER_FILE)}: vocab_size {size} ({dtype} tokens), "
          f"sha256 {settings['sha256']}" + (f"; replaced {removed} shard(s) of an earlier run" if removed else ""))
    return 0


# ---- command line ----------------------------------------------------------

def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="make_token_file.py", description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[1:]))
    parser.add_argument("inputs", nargs="+", metavar="INPUT",
                        help="byte mode: INPUT OUTPUT.h5; BPE mode: files, folders and glob patterns")
    parser.add_argument("--dataset", default="tokens",
                        help="name of the 1-D dataset (data.dataset in the deck; default: tokens)")
    parser.add_argument("--eval-fraction", type=float, default=None,
                        help="fraction of the input, taken from the end, held out for evaluation")
    parser.add_argument("--eval-output", default=None,
                        help="byte mode: HDF5 token file for the held-out bytes (data.eval_path)")
    bpe = parser.add_argument_group("BPE mode")
    bpe.add_argument("--out-dir", default=None, help="folder for tokenizer.json and the shards")
    bpe.add_argument("--vocab-size", type=int, default=None,
                     help="train a byte-level BPE of at most this many tokens (model.vocab_size); "
                          "with --tokenizer, the most it may have")
    bpe.add_argument("--tokenizer", default=None, help="use this saved tokenizer.json instead of training one")
    bpe.add_argument("--shard-tokens", type=int, default=DEFAULT_SHARD_TOKENS,
                     help=f"tokens per shard (default: {DEFAULT_SHARD_TOKENS})")
    bpe.add_argument("--eot", default=EOT, help=f"token appended after each file (default: {EOT}; '' = none)")
    bpe.add_argument("--quiet", action="store_true", help="no progress on stderr")
    args = parser.parse_args(argv)
    args.bpe = args.out_dir is not None or args.vocab_size is not None or args.tokenizer is not None
    if args.eval_fraction is not None and not 0.0 < args.eval_fraction < 1.0:
        parser.error(f"--eval-fraction must be between 0 and 1 (exclusive), not {args.eval_fraction}")
    if not args.dataset:
        parser.error("--dataset must not be empty")
    if not args.bpe:
        if len(args.inputs) != 2:
            parser.error("byte mode takes INPUT OUTPUT.h5; for a corpus of several files give --out-dir "
                         "with --vocab-size or --tokenizer")
        args.input, args.output = args.inputs
        if (args.eval_fraction is None) != (args.eval_output is None):
            parser.error("--eval-fraction and --eval-output go together")
        return args
    if args.out_dir is None:
        parser.error("--vocab-size and --tokenizer write shards: give --out-dir DIR")
    if args.vocab_size is None and args.tokenizer is None:
        parser.error("--out-dir needs --vocab-size V (train a tokenizer) or --tokenizer FILE (use a saved one)")
    if args.eval_output is not None:
        parser.error("--eval-output is for byte mode; with --out-dir the held-out shards are DIR/eval_*.h5")
    minimum = 256 + (1 if args.eot else 0)
    if args.tokenizer is None and args.vocab_size < minimum:
        parser.error(f"--vocab-size must be at least {minimum} (the 256 byte symbols"
                     + (f" and {args.eot})" if args.eot else ")") + f", not {args.vocab_size}")
    if args.tokenizer is not None and args.vocab_size is not None and args.vocab_size < 2:
        parser.error(f"--vocab-size must be at least 2, not {args.vocab_size}")
    if args.shard_tokens < MIN_TOKENS:
        parser.error(f"--shard-tokens must be at least {MIN_TOKENS}, not {args.shard_tokens}")
    return args


def run_bytes(args):
    outputs = [args.output] + ([args.eval_output] if args.eval_output else [])
    for out in outputs:
        if os.path.exists(args.input) and os.path.exists(out) and os.path.samefile(args.input, out):
            raise UserError(f"output '{out}' is the input file")
    if args.eval_output and os.path.abspath(args.eval_output) == os.path.abspath(args.output):
        raise UserError("--eval-output must differ from OUTPUT")
    tokens = read_bytes(args.input)
    source = os.path.basename(args.input)
    if args.eval_output:
        train, held_out, eval_start = split_tokens(tokens, args.eval_fraction)
        write_atomic(args.output, args.dataset, train, source, "train", 0)
        write_atomic(args.eval_output, args.dataset, held_out, source, "eval", eval_start)
        print(f"{args.output}: {train.size} tokens (train); "
              f"{args.eval_output}: {held_out.size} tokens (eval); vocab_size {VOCAB_SIZE}")
    else:
        write_atomic(args.output, args.dataset, tokens, source, "all", 0)
        print(f"{args.output}: {tokens.size} tokens; vocab_size {VOCAB_SIZE}")
    return 0


def main(argv=None):
    args = parse_args(argv)
    try:
        return run_bpe(args) if args.bpe else run_bytes(args)
    except UserError as exc:
        print(f"make_token_file.py: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
