#!/usr/bin/env python3
"""check_transformers.py: the Hugging Face export checked with transformers
itself (run by jobs/check_transformers.sh, which makes the venv; the CI
check without PyTorch is tests/tools/test_hf_gpt2.py).

    python jobs/check_transformers.py BUILD_DIR OUT.md

A small GPT trains on 2 ranks on the license texts of Debian's base-files
(byte-level BPE of 512 tokens, model.vocab_multiple 128) and is exported
with tools/hf_gpt2.py. Then: GPT2LMHeadModel.from_pretrained loads it
(no missing or unexpected weights) and its logits equal pipetrain's
(build/pipetrain_logits) within 1e-4; AutoTokenizer loads the tokenizer and
encodes and decodes as the run's tokenizer does; the model generates; the
directory transformers' save_pretrained writes imports back to weights with
pipetrain logits bitwise the trained checkpoint's. Writes the table to OUT.md.
"""
import glob
import json
import os
import platform
import subprocess
import sys
import tempfile

import numpy as np
import safetensors
import safetensors.numpy
import torch
import transformers
from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import hf_gpt2  # noqa: E402

V, T, C, H, BLOCKS, STEPS = 512, 64, 64, 4, 2, 150
TOLERANCE = 1e-4
PROMPT = "Permission is hereby granted"
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def sh(*argv):
    p = subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=ENV)
    if p.returncode != 0:
        sys.exit(f"{argv[:3]} failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    return p.stdout


def cpu_model():
    for line in sh("lscpu").splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def pipetrain_logits(build, deck, ckpt, tokens_txt, shape, tmp):
    out = f"{tmp}/logits.f32"
    sh(f"{build}/pipetrain_logits", deck, ckpt, tokens_txt, out)
    return np.fromfile(out, "<f4").reshape(shape + (V,))


def main():
    build, out_md = os.path.abspath(sys.argv[1]), sys.argv[2]
    os.chdir(ROOT)
    tmp = tempfile.mkdtemp(prefix="check_transformers_")
    sh(sys.executable, "tools/make_token_file.py", "--quiet", "--out-dir", f"{tmp}/corpus",
       "--vocab-size", V, "--eval-fraction", "0.1", "/usr/share/common-licenses")
    deck = f"{tmp}/deck.toml"
    with open(deck, "w") as f:
        f.write(f"""[model]
type = "gpt"
vocab_size = {V}
vocab_multiple = 128
seq_len = {T}
d_model = {C}
heads = {H}
blocks = {BLOCKS}
[data]
type = "hdf5"
path = "{tmp}/corpus/train_*.h5"
tokenizer = "{tmp}/corpus/tokenizer.json"
shuffle = true
[training]
steps = {STEPS}
batch_size = 16
lr = 3e-3
warmup_steps = 5
blas_threads = 1
[pipeline]
micro_batches = 4
predict = false
[output]
dir = "{tmp}/run"
checkpoint_every = {STEPS}
""")
    sh("mpirun", "--oversubscribe", "--bind-to", "none", "-np", 2, f"{build}/pipetrain",
       "train", deck)
    ckpt = f"{tmp}/run/checkpoints/step_{STEPS:08d}"
    hf = f"{tmp}/hf"
    sh(sys.executable, "tools/hf_gpt2.py", "export", ckpt, hf)

    import h5py
    with h5py.File(sorted(glob.glob(f"{tmp}/corpus/eval_*.h5"))[0]) as f:
        tokens = f["tokens"][:4 * T].astype(np.int64).reshape(4, T)
    tokens_txt = f"{tmp}/tokens.txt"
    np.savetxt(tokens_txt, tokens, fmt="%d")
    theirs = pipetrain_logits(build, deck, ckpt, tokens_txt, tokens.shape, tmp)

    rows = []
    official = safetensors.numpy.load_file(f"{hf}/model.safetensors")
    ours = hf_gpt2.read_safetensors(f"{hf}/model.safetensors")
    same = sorted(official) == sorted(ours) and all(
        official[k].dtype == np.float32 and np.array_equal(official[k], ours[k]) for k in ours)
    rows.append((f"safetensors.numpy.load_file reads the {len(official)} tensors written",
                 str(same), same))
    model, info = transformers.GPT2LMHeadModel.from_pretrained(hf, output_loading_info=True)
    model.eval()
    loading_clean = not any(info[k] for k in ("missing_keys", "unexpected_keys",
                                              "mismatched_keys"))
    rows.append(("from_pretrained: no missing, unexpected or mismatched weights",
                 str(loading_clean), loading_clean))
    with torch.no_grad():
        mine = model(torch.from_numpy(tokens)).logits.numpy()
    diff = float(np.abs(mine - theirs).max())
    rows.append((f"logits vs pipetrain's, max abs difference ({tokens.size} tokens x {V})",
                 f"{diff:.2e}", diff < TOLERANCE))

    tok = transformers.AutoTokenizer.from_pretrained(hf)
    ref = Tokenizer.from_file(f"{tmp}/corpus/tokenizer.json")
    text = open("/usr/share/common-licenses/BSD").read()
    same_ids = tok(text)["input_ids"] == ref.encode(text).ids
    rows.append((f"AutoTokenizer ({type(tok).__name__}) ids equal the run's tokenizer's",
                 str(same_ids), same_ids))
    round_trip = tok.decode(tok(text)["input_ids"]) == text
    rows.append(("AutoTokenizer decode(encode(text)) == text", str(round_trip), round_trip))

    ids = tok(PROMPT, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        gen = model.generate(ids, max_new_tokens=20, do_sample=False,
                             pad_token_id=model.config.eos_token_id)
    sample = tok.decode(gen[0]).replace("\n", " ").replace("|", "\\|")

    saved = f"{tmp}/saved_by_transformers"
    model.save_pretrained(saved)
    tok.save_pretrained(saved)
    sh(sys.executable, "tools/hf_gpt2.py", "import", saved, f"{tmp}/imported", "--vocab-multiple",
       128)
    back = pipetrain_logits(build, deck, f"{tmp}/imported/checkpoint", tokens_txt,
                            tokens.shape, tmp)
    bitwise = bool(np.array_equal(back.view("<u4"), theirs.view("<u4")))
    rows.append(("save_pretrained -> hf_gpt2.py import: pipetrain logits bitwise the "
                 "checkpoint's", str(bitwise), bitwise))

    ok = all(r[2] for r in rows)
    with open(out_md, "w") as f:
        f.write("# Hugging Face export checked with transformers\n\n")
        f.write("`jobs/check_transformers.sh` (the CI check without PyTorch is "
                "`tests/tools/test_hf_gpt2.py`; [docs/interop.md](../docs/interop.md)).\n\n")
        f.write(f"- CPU: {cpu_model()}, {os.cpu_count()} cores; Python {platform.python_version()}\n")
        f.write(f"- torch {torch.__version__} (CPU), transformers {transformers.__version__}, "
                f"safetensors {safetensors.__version__}, numpy {np.__version__}\n")
        f.write(f"- model: GPT, {BLOCKS} blocks, d_model {C}, {H} heads, seq_len {T}, "
                f"vocab {V} (BPE on /usr/share/common-licenses, model.vocab_multiple 128), "
                f"{STEPS} steps on 2 ranks; pipetrain logits: `build/pipetrain_logits` (CPU, fp32)\n\n")
        f.write("| check | value | pass |\n|---|---|---|\n")
        for name, value, passed in rows:
            f.write(f"| {name} | {value} | {'yes' if passed else 'NO'} |\n")
        f.write(f"\nGreedy sample from transformers, prompt \"{PROMPT}\": `{sample}`\n")
    print(open(out_md).read())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
