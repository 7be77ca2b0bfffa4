#!/usr/bin/env python3
"""hf_gpt2.py: a pipetrain GPT checkpoint to a Hugging Face GPT-2 model
directory and back (docs/interop.md).

    tools/.venv/bin/python tools/hf_gpt2.py export CHECKPOINT OUT_DIR [--tokenizer FILE]
                                             [--deck DECK]
    tools/.venv/bin/python tools/hf_gpt2.py import HF_DIR OUT_DIR [--data PATTERN]
                                             [--vocab-multiple M]

export: CHECKPOINT is a checkpoint directory, its manifest.h5 or a
checkpoint root (its `latest`). Writes OUT_DIR/config.json and
OUT_DIR/model.safetensors (float32), which transformers'
GPT2LMHeadModel.from_pretrained loads, and, when the run's tokenizer is
found (--tokenizer, the deck's data.tokenizer, or the tokenizer_json that
BPE token files carry), tokenizer.json and tokenizer_config.json for
AutoTokenizer.

import: HF_DIR holds config.json and model.safetensors (or a sharded
model.safetensors.index.json) of a GPT-2. Writes OUT_DIR/checkpoint (a
format-3 pipetrain checkpoint of the weights, for training.init_from),
OUT_DIR/deck.toml (a deck whose [model] matches it) and, when HF_DIR has
one, OUT_DIR/tokenizer.json. What pipetrain's GPT cannot represent is
refused, naming the config key or tensor.

No PyTorch: safetensors is read and written here with NumPy (an 8-byte
little-endian header length, a JSON header, the raw tensors). Checkpoints
are read (verified as pipetrain verifies them) and written by
tools/checkpoint_io.py.
"""
import argparse
import json
import math
import os
import shutil
import sys
import tomllib

import h5py
import numpy as np

from checkpoint_io import CheckpointError, read_checkpoint, write_checkpoint

EOT = "<|endoftext|>"
# GPT-2 as pipetrain computes it: LayerNorm eps of torch.nn.LayerNorm, the
# tanh form of GELU, attention scaled by 1/sqrt(head size).
LAYER_NORM_EPS = 1e-5
TANH_GELUS = ("gelu_new", "gelu_pytorch_tanh")
# Non-parameter buffers older transformers versions saved with GPT-2.
BUFFERS = ("attn.bias", "attn.masked_bias")
SAFETENSORS_DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": None, "F64": "<f8"}


class InteropError(Exception):
    """A bad input: the message names the file and the key."""


# ---- safetensors, with NumPy ----

def write_safetensors(path, tensors, metadata):
    """tensors: {name: float32 array}; written in name order, so the same
    tensors give the same bytes."""
    header, offset = {"__metadata__": metadata}, 0
    names = sorted(tensors)
    for name in names:
        n = tensors[name].nbytes
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for name in names:
            f.write(np.ascontiguousarray(tensors[name], dtype="<f4").tobytes())


def read_safetensors(path):
    """{name: float32 array} of a safetensors file (F32, F16, BF16, F64)."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise InteropError(f"{path}: too short for a safetensors file")
    n = int.from_bytes(blob[:8], "little")
    try:
        header = json.loads(blob[8:8 + n])
    except (ValueError, UnicodeDecodeError):
        raise InteropError(f"{path}: its header is not the JSON of a safetensors file")
    data = memoryview(blob)[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, shape = info.get("dtype"), tuple(info.get("shape", ()))
        begin, end = info.get("data_offsets", (0, -1))
        if dtype not in SAFETENSORS_DTYPES:
            raise InteropError(f"{path}: tensor {name} has dtype {dtype}; pipetrain reads "
                               f"floating-point weights ({', '.join(SAFETENSORS_DTYPES)})")
        count = math.prod(shape)
        width = 2 if dtype in ("F16", "BF16") else (8 if dtype == "F64" else 4)
        if end - begin != count * width or end > len(data):
            raise InteropError(f"{path}: tensor {name}: data_offsets {begin}..{end} do not hold "
                               f"{dtype} {list(shape)} (damaged or truncated file)")
        raw = data[begin:end]
        if dtype == "BF16":
            bits = np.frombuffer(raw, "<u2").astype("<u4") << 16
            values = bits.view("<f4")
        else:
            values = np.frombuffer(raw, SAFETENSORS_DTYPES[dtype]).astype("<f4")
        out[name] = values.reshape(shape)
    return out


# ---- the mapping ----

def pipetrain_names(blocks):
    """pipetrain's GPT parameter names in its global order."""
    names = ["embed.wte", "embed.wpe"]
    for k in range(blocks):
        names += [f"block{k}.{p}" for p in (
            "ln1.weight", "ln1.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight",
            "attn.proj.bias", "ln2.weight", "ln2.bias", "mlp.fc.weight", "mlp.fc.bias",
            "mlp.proj.weight", "mlp.proj.bias")]
    return names + ["head.ln_f.weight", "head.ln_f.bias", "head.lm_head.weight"]


# pipetrain block parameter -> (GPT-2 name, transposed). pipetrain's Linear
# weights are (out, in) (y = x W^T + b); GPT-2's Conv1D weights are (in, out)
# (y = x W + b). The fused q, k, v order and the head split inside each
# (head h: columns h*D..h*D+D-1 of its third) are the same in both.
BLOCK_MAP = {
    "ln1.weight": ("ln_1.weight", False), "ln1.bias": ("ln_1.bias", False),
    "attn.qkv.weight": ("attn.c_attn.weight", True), "attn.qkv.bias": ("attn.c_attn.bias", False),
    "attn.proj.weight": ("attn.c_proj.weight", True), "attn.proj.bias": ("attn.c_proj.bias", False),
    "ln2.weight": ("ln_2.weight", False), "ln2.bias": ("ln_2.bias", False),
    "mlp.fc.weight": ("mlp.c_fc.weight", True), "mlp.fc.bias": ("mlp.c_fc.bias", False),
    "mlp.proj.weight": ("mlp.c_proj.weight", True), "mlp.proj.bias": ("mlp.c_proj.bias", False),
}


def pipetrain_shapes(model):
    """{pipetrain name: shape} of the GPT of `model` ([model] values), with
    the real vocabulary V (model.vocab_multiple's padding rows left out)."""
    V, T, C = int(model["vocab_size"]), int(model["seq_len"]), int(model["d_model"])
    RC = int(model["mlp_ratio"]) * C
    block = {"ln1.weight": (C,), "ln1.bias": (C,), "attn.qkv.weight": (3 * C, C),
             "attn.qkv.bias": (3 * C,), "attn.proj.weight": (C, C), "attn.proj.bias": (C,),
             "ln2.weight": (C,), "ln2.bias": (C,), "mlp.fc.weight": (RC, C),
             "mlp.fc.bias": (RC,), "mlp.proj.weight": (C, RC), "mlp.proj.bias": (C,)}
    fixed = {"embed.wte": (V, C), "embed.wpe": (T, C), "head.ln_f.weight": (C,),
             "head.ln_f.bias": (C,), "head.lm_head.weight": (V, C)}
    return {name: fixed[name] if name in fixed else block[name.split(".", 1)[1]]
            for name in pipetrain_names(int(model["blocks"]))}


def hf_name(pt_name):
    """(GPT-2 state-dict name, transposed) of a pipetrain parameter name."""
    fixed = {"embed.wte": "transformer.wte.weight", "embed.wpe": "transformer.wpe.weight",
             "head.ln_f.weight": "transformer.ln_f.weight",
             "head.ln_f.bias": "transformer.ln_f.bias", "head.lm_head.weight": "lm_head.weight"}
    if pt_name in fixed:
        return fixed[pt_name], False
    block, rest = pt_name.split(".", 1)
    name, transposed = BLOCK_MAP[rest]
    return f"transformer.h.{block[len('block'):]}.{name}", transposed


# ---- export ----

def deck_model(deck_text, where):
    """The [model] table of a resolved deck, with pipetrain's defaults."""
    try:
        deck = tomllib.loads(deck_text)
    except tomllib.TOMLDecodeError as e:
        raise InteropError(f"{where}: its deck is not TOML ({e})")
    model = {"type": "mlp", "vocab_size": 256, "vocab_multiple": 1, "seq_len": 64,
             "d_model": 128, "heads": 4, "mlp_ratio": 4, "blocks": 4}
    model.update(deck.get("model", {}))
    return deck, model


def find_tokenizer(deck, explicit):
    """(tokenizer.json bytes or None, where it came from)."""
    if explicit:
        if not os.path.isfile(explicit):
            raise InteropError(f"--tokenizer {explicit}: no such file")
        with open(explicit, "rb") as f:
            return f.read(), explicit
    data = deck.get("data", {})
    tok = data.get("tokenizer", "")
    if tok and tok != "bytes" and os.path.exists(tok):
        with open(tok, "rb") as f:
            return f.read(), tok
    paths = data.get("path", [])
    for path in [paths] if isinstance(paths, str) else paths:
        if os.path.exists(path):
            with h5py.File(path, "r") as f:
                if "tokenizer_json" in f:
                    return bytes(f["tokenizer_json"][...]), path
    return None, ("the run's token files carry no tokenizer (byte tokens?)"
                  if tok == "bytes" else "no tokenizer found (give --tokenizer FILE)")


def gpt2_config(model, eot_id):
    C, V = int(model["d_model"]), int(model["vocab_size"])
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": V,
        "n_positions": int(model["seq_len"]),
        "n_ctx": int(model["seq_len"]),
        "n_embd": C,
        "n_layer": int(model["blocks"]),
        "n_head": int(model["heads"]),
        "n_inner": int(model["mlp_ratio"]) * C,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": LAYER_NORM_EPS,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "add_cross_attention": False,
        "tie_word_embeddings": False,
        "use_cache": True,
        "bos_token_id": eot_id,
        "eos_token_id": eot_id,
        "torch_dtype": "float32",
    }


def export(spec, out_dir, tokenizer=None, deck_path=None):
    ckpt, weights, deck_text = read_checkpoint(spec)
    where = os.path.join(ckpt, "manifest.h5")
    if deck_path:  # a checkpoint written by hand may record no deck
        if not os.path.isfile(deck_path):
            raise InteropError(f"--deck {deck_path}: no such file")
        with open(deck_path) as f:
            deck_text, where = f.read(), deck_path
    elif not deck_text:
        raise InteropError(f"checkpoint {where}: records no deck, so the model's sizes "
                           "(model.heads) are unknown: give --deck DECK")
    deck, model = deck_model(deck_text, where)
    if model["type"] != "gpt":
        raise InteropError(f"checkpoint {ckpt}: model.type = \"{model['type']}\"; only a GPT "
                           "(model.type = \"gpt\") maps to GPT-2")
    names = pipetrain_names(int(model["blocks"]))
    missing = [n for n in names if n not in weights]
    extra = [n for n in weights if n not in names]
    if missing or extra:
        raise InteropError(f"checkpoint {ckpt}: its parameters do not match its deck's [model] "
                           f"(missing {missing[:3]}, unexpected {extra[:3]})")
    V, C = int(model["vocab_size"]), int(model["d_model"])
    tensors = {}
    for name, want in pipetrain_shapes(model).items():
        v = weights[name]
        if name in ("embed.wte", "head.lm_head.weight"):
            v = v[:V]  # the padded rows of model.vocab_multiple are not the model's
        if v.shape != want:
            raise InteropError(f"checkpoint {ckpt}: {name} has shape {list(weights[name].shape)}"
                               f", but its deck's [model] gives {list(want)}")
        hname, transposed = hf_name(name)
        tensors[hname] = np.ascontiguousarray(v.T if transposed else v)
    tok_json, tok_from = find_tokenizer(deck, tokenizer)
    eot_id = None
    if tok_json is not None:
        vocab = json.loads(tok_json).get("model", {}).get("vocab", {})
        eot_id = vocab.get(EOT) if isinstance(vocab, dict) else None
    os.makedirs(out_dir, exist_ok=True)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors, {"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(gpt2_config(model, eot_id), f, indent=2, sort_keys=True)
        f.write("\n")
    if tok_json is not None:
        with open(os.path.join(out_dir, "tokenizer.json"), "wb") as f:
            f.write(tok_json)
        # Byte-level BPE decodes to the text itself: no clean-up of spaces.
        tok_config = {"tokenizer_class": "PreTrainedTokenizerFast",
                      "model_max_length": int(model["seq_len"]),
                      "clean_up_tokenization_spaces": False}
        if eot_id is not None:
            tok_config.update(bos_token=EOT, eos_token=EOT, unk_token=EOT)
        with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
            json.dump(tok_config, f, indent=2, sort_keys=True)
            f.write("\n")
        print(f"{out_dir}: tokenizer.json from {tok_from}")
    else:
        print(f"{out_dir}: no tokenizer written: {tok_from}")
    print(f"{out_dir}: GPT-2 with {len(tensors)} tensors from {ckpt} "
          f"(n_layer {model['blocks']}, n_embd {C}, n_head {model['heads']}, vocab {V})")


# ---- import ----

def refuse(where, key, value, why):
    raise InteropError(f"{where}: {key} = {json.dumps(value)}: {why}")


def check_config(config, where):
    """The pipetrain [model] values of a GPT-2 config.json; refuses what
    pipetrain's GPT does not compute."""
    def get(key, default):
        return config.get(key, default)
    if get("model_type", None) != "gpt2":
        refuse(where, "model_type", get("model_type", None),
               "pipetrain imports GPT-2 (\"gpt2\") models only")
    act = get("activation_function", "gelu_new")
    if act not in TANH_GELUS:
        refuse(where, "activation_function", act, "pipetrain's GPT uses the tanh form of GELU "
               "(\"gelu_new\" or \"gelu_pytorch_tanh\")")
    eps = get("layer_norm_epsilon", 1e-5)
    if eps != LAYER_NORM_EPS:
        refuse(where, "layer_norm_epsilon", eps, f"pipetrain's LayerNorm uses {LAYER_NORM_EPS}")
    if not get("scale_attn_weights", True):
        refuse(where, "scale_attn_weights", False,
               "pipetrain scales attention scores by 1/sqrt(head size)")
    if get("scale_attn_by_inverse_layer_idx", False):
        refuse(where, "scale_attn_by_inverse_layer_idx", True,
               "pipetrain does not scale attention by the layer index")
    if get("add_cross_attention", False):
        refuse(where, "add_cross_attention", True, "pipetrain's GPT is decoder-only")
    C, H = int(get("n_embd", 768)), int(get("n_head", 12))
    if C % H:
        refuse(where, "n_head", H, f"it must divide n_embd = {C}")
    inner = get("n_inner", None)
    inner = 4 * C if inner is None else int(inner)
    if inner % C:
        refuse(where, "n_inner", inner, f"pipetrain's MLP width is model.mlp_ratio x d_model, "
               f"a multiple of n_embd = {C}")
    return {"type": "gpt", "vocab_size": int(get("vocab_size", 50257)),
            "seq_len": int(get("n_positions", 1024)), "d_model": C, "heads": H,
            "mlp_ratio": inner // C, "blocks": int(get("n_layer", 12))}


def read_hf_tensors(hf_dir):
    single = os.path.join(hf_dir, "model.safetensors")
    index = os.path.join(hf_dir, "model.safetensors.index.json")
    if os.path.exists(single):
        return read_safetensors(single), single
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f).get("weight_map", {}).values()))
        tensors = {}
        for name in files:
            tensors.update(read_safetensors(os.path.join(hf_dir, name)))
        return tensors, index
    raise InteropError(f"{hf_dir}: no model.safetensors (a pytorch_model.bin needs PyTorch to "
                       "read: load it in transformers and save_pretrained it, which writes "
                       "safetensors)")


def hf_to_pipetrain(tensors, model, config, where, vocab_multiple):
    """{pipetrain name: float32} from GPT-2 tensors; refuses a missing,
    misshapen or unknown tensor, naming it."""
    # Accept the bare GPT2Model names ("h.0.ln_1.weight") as well.
    named = {}
    for name, v in tensors.items():
        key = name if name.startswith(("transformer.", "lm_head.")) else "transformer." + name
        if any(key.endswith("." + b) for b in BUFFERS):
            continue
        named[key] = v
    C, V = model["d_model"], model["vocab_size"]
    tied = config.get("tie_word_embeddings", True)
    if "lm_head.weight" not in named or tied:
        # Tied: GPT-2 uses wte as the head; pipetrain's head is its own copy.
        named["lm_head.weight"] = named.get("transformer.wte.weight")
    shapes = pipetrain_shapes(model)
    weights, used = {}, set()
    Vp = -(-V // vocab_multiple) * vocab_multiple
    for name in pipetrain_names(model["blocks"]):
        hname, transposed = hf_name(name)
        v = named.get(hname)
        if v is None:
            why = (" (every Linear layer but the LM head has a bias, every LayerNorm a weight "
                   "and a bias)" if name.endswith(".bias") else "")
            raise InteropError(f"{where}: no tensor {hname}; pipetrain's GPT needs it for "
                               f"{name}{why}")
        used.add(hname)
        want = shapes[name]
        got = v.T if transposed else v
        if got.shape != want:
            hwant = want[::-1] if transposed else want
            raise InteropError(f"{where}: tensor {hname} has shape {list(v.shape)}, but "
                               f"config.json's sizes need {list(hwant)}")
        got = np.ascontiguousarray(got, "<f4")
        if name in ("embed.wte", "head.lm_head.weight") and Vp > V:
            got = np.concatenate([got, np.zeros((Vp - V, C), "<f4")])  # zero padding rows
        weights[name] = got
    unknown = sorted(set(named) - used)
    if unknown:
        raise InteropError(f"{where}: tensor {unknown[0]} has no counterpart in pipetrain's GPT"
                           + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""))
    return weights


def deck_text_for(model, vocab_multiple, init_from, data, tokenizer):
    lines = [
        "# deck.toml: written by tools/hf_gpt2.py import; [model] matches the imported",
        "# GPT-2. Make token files with its tokenizer (tools/make_token_file.py",
        "# --tokenizer ... --out-dir ...), point data.path at them, then",
        "#   mpirun -np 2 --oversubscribe build/pipetrain train THIS_DECK",
        "",
        "[model]",
        'type = "gpt"',
    ]
    for key in ("vocab_size", "seq_len", "d_model", "heads", "mlp_ratio", "blocks"):
        lines.append(f"{key} = {model[key]}")
    lines += [f"vocab_multiple = {vocab_multiple}", "", "[data]", 'type = "hdf5"',
              f"path = {json.dumps(data)}"]
    if tokenizer:
        lines.append(f"tokenizer = {json.dumps(tokenizer)}")
    lines += ["", "[training]", f"init_from = {json.dumps(init_from)}", "steps = 100",
              "batch_size = 8", 'optimizer = "adamw"', "lr = 1e-4", "", "[pipeline]",
              "stages = 0", "micro_batches = 4", "", "[output]", 'dir = "runs/finetune"', ""]
    return "\n".join(lines)


def import_(hf_dir, out_dir, data="runs/finetune/train_*.h5", vocab_multiple=1):
    cpath = os.path.join(hf_dir, "config.json")
    if not os.path.exists(cpath):
        raise InteropError(f"{hf_dir}: no config.json (not a Hugging Face model directory)")
    with open(cpath) as f:
        config = json.load(f)
    model = check_config(config, cpath)
    if vocab_multiple < 1:
        raise InteropError(f"--vocab-multiple {vocab_multiple}: must be at least 1")
    tensors, where = read_hf_tensors(hf_dir)
    weights = hf_to_pipetrain(tensors, model, config, where, vocab_multiple)
    if os.path.exists(out_dir):
        raise InteropError(f"{out_dir}: exists; give a new directory")
    os.makedirs(out_dir)
    ckpt = os.path.abspath(os.path.join(out_dir, "checkpoint"))
    tokenizer = ""
    if os.path.exists(os.path.join(hf_dir, "tokenizer.json")):
        tokenizer = os.path.abspath(os.path.join(out_dir, "tokenizer.json"))
        shutil.copyfile(os.path.join(hf_dir, "tokenizer.json"), tokenizer)
    deck = deck_text_for(model, vocab_multiple, ckpt, data, tokenizer)
    write_checkpoint(ckpt, weights, deck)
    with open(os.path.join(out_dir, "deck.toml"), "w") as f:
        f.write(deck)
    print(f"{out_dir}: checkpoint (training.init_from = \"{ckpt}\"), deck.toml"
          + (", tokenizer.json" if tokenizer else "") + "; [model] "
          + " ".join(f"{k}={model[k]}" for k in ("vocab_size", "seq_len", "d_model", "heads",
                                                 "mlp_ratio", "blocks")))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("export", help="a pipetrain GPT checkpoint to a GPT-2 directory")
    ex.add_argument("checkpoint")
    ex.add_argument("out_dir")
    ex.add_argument("--tokenizer", help="tokenizer.json to save beside the model")
    ex.add_argument("--deck", help="the deck of the model, when the checkpoint records none")
    im = sub.add_parser("import", help="a GPT-2 directory to a pipetrain checkpoint and deck")
    im.add_argument("hf_dir")
    im.add_argument("out_dir")
    im.add_argument("--data", default="runs/finetune/train_*.h5",
                    help="data.path of the deck written (token files made with its tokenizer)")
    im.add_argument("--vocab-multiple", type=int, default=1,
                    help="model.vocab_multiple: pad the vocabulary rows with zeros")
    args = ap.parse_args(argv)
    try:
        if args.command == "export":
            export(args.checkpoint, args.out_dir, args.tokenizer, args.deck)
        else:
            import_(args.hf_dir, args.out_dir, args.data, args.vocab_multiple)
    except (InteropError, CheckpointError) as e:
        print(f"hf_gpt2.py: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
