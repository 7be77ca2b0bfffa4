#!/usr/bin/env python3
"""make_token_file.py: turn any file into a byte-level HDF5 token file for pipetrain.

    tools/.venv/bin/python tools/make_token_file.py INPUT OUTPUT.h5 [--dataset tokens]
        [--eval-fraction 0.1 --eval-output EVAL.h5]

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
"""
import argparse
import os
import sys

try:
    import h5py
    import numpy as np
except ImportError as exc:  # pragma: no cover - depends on the environment
    sys.exit(f"make_token_file.py: error: {exc.name} is missing; run scripts/setup-tools-venv.sh "
             "and use tools/.venv/bin/python")

VOCAB_SIZE = 256
MIN_TOKENS = 2  # one window of model.seq_len + 1 >= 2 tokens


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
        os.replace(tmp, path)
    except OSError as exc:
        raise UserError(f"cannot write '{path}': {exc.strerror or exc}") from exc
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="make_token_file.py", description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[1:]))
    parser.add_argument("input", help="any file; each byte becomes one token")
    parser.add_argument("output", help="HDF5 token file to write (training data)")
    parser.add_argument("--dataset", default="tokens",
                        help="name of the 1-D dataset (data.dataset in the deck; default: tokens)")
    parser.add_argument("--eval-fraction", type=float, default=None,
                        help="fraction of the bytes, taken from the end, for --eval-output")
    parser.add_argument("--eval-output", default=None,
                        help="HDF5 token file for the held-out bytes (data.eval_path)")
    args = parser.parse_args(argv)
    if (args.eval_fraction is None) != (args.eval_output is None):
        parser.error("--eval-fraction and --eval-output go together")
    if args.eval_fraction is not None and not 0.0 < args.eval_fraction < 1.0:
        parser.error(f"--eval-fraction must be between 0 and 1 (exclusive), not {args.eval_fraction}")
    if not args.dataset:
        parser.error("--dataset must not be empty")
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
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
    except UserError as exc:
        print(f"make_token_file.py: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
