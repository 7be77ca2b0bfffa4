#!/usr/bin/env python3
"""test_hf_gpt2.py: tools/hf_gpt2.py, the Hugging Face GPT-2 export and
import (#43, part 3; docs/interop.md), without PyTorch.

    tools/.venv/bin/python tests/tools/test_hf_gpt2.py BUILD_DIR

A tiny GPT (2 blocks, d_model 32, a padded 300-token BPE vocabulary) trains
3 steps on 2 ranks on real text and saves a checkpoint. Its export is read
back with a safetensors reader and a GPT-2 forward written here from
GPT-2's definition (Conv1D weights (in, out), the fused c_attn split into q,
k, v and heads, tanh GELU, LayerNorm eps 1e-5, untied lm_head), in float64;
its logits must equal pipetrain's own (build/pipetrain_logits) within 1e-4.
Import of the export gives weights whose pipetrain logits are bitwise the
trained checkpoint's, and export -> import -> export is bitwise. The deck
the import writes trains from the imported weights (training.init_from).
Each input pipetrain's GPT cannot represent is refused with its message.
Prints one line per check and "N passed, M failed"; exits 1 on failure.
"""
import contextlib
import glob
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback

import h5py
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import checkpoint_io  # noqa: E402
import hf_gpt2 as tool  # noqa: E402
import make_token_file  # noqa: E402

CORPUS = [f"/usr/share/common-licenses/{n}" for n in ("Apache-2.0", "Artistic", "BSD")]
V, VOCAB_MULTIPLE, T, C, H, BLOCKS = 300, 8, 16, 32, 4, 2
TOLERANCE = 1e-4
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")


def sh(*argv, expect=0):
    """Runs a command; returns its output; its status must be `expect`."""
    p = subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=ENV,
                       timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode == expect, f"{argv[:3]}: status {p.returncode}, not {expect}:\n{out}"
    return out


def hf(*argv, expect=0):
    """Runs tools/hf_gpt2.py in this process (a second each saved); returns
    its output; its status must be `expect`."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        status = tool.main([str(a) for a in argv])
    assert status == expect, f"hf_gpt2.py {argv[:2]}: status {status}, not {expect}:\n{out.getvalue()}"
    return out.getvalue()


# ---- GPT-2 in NumPy, from the safetensors file alone ----

def read_safetensors_independently(path):
    """{name: array} parsed from the bytes; checks the layout the format
    requires (8-byte length, JSON header, contiguous data offsets)."""
    with open(path, "rb") as f:
        blob = f.read()
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    assert header.pop("__metadata__") == {"format": "pt"}, "metadata format pt (transformers)"
    data, out, end = blob[8 + n:], {}, 0
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, stop = info["data_offsets"]
        assert begin == end, f"{name}: a gap or overlap at {begin}"
        assert info["dtype"] == "F32", name
        out[name] = np.frombuffer(data[begin:stop], "<f4").reshape(info["shape"])
        end = stop
    assert end == len(data), "data past the last tensor"
    return out


def gpt2_logits(hf_dir, tokens):
    """GPT-2 logits (rows, T, V) of tokens (rows, T), float64."""
    with open(os.path.join(hf_dir, "config.json")) as f:
        cfg = json.load(f)
    w = {k: v.astype(np.float64) for k, v in
         read_safetensors_independently(os.path.join(hf_dir, "model.safetensors")).items()}
    nh, eps = cfg["n_head"], cfg["layer_norm_epsilon"]
    assert cfg["activation_function"] == "gelu_new" and not cfg["tie_word_embeddings"]

    def ln(x, p):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * w[p + ".weight"] + w[p + ".bias"]

    def conv1d(x, p):  # GPT-2's Conv1D: weight (in, out)
        return x @ w[p + ".weight"] + w[p + ".bias"]

    def gelu_new(x):
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))

    rows, t = tokens.shape
    x = w["transformer.wte.weight"][tokens] + w["transformer.wpe.weight"][:t]
    mask = np.triu(np.ones((t, t), bool), 1)
    for i in range(cfg["n_layer"]):
        p = f"transformer.h.{i}"
        q, k, v = np.split(conv1d(ln(x, p + ".ln_1"), p + ".attn.c_attn"), 3, axis=-1)
        q, k, v = (a.reshape(rows, t, nh, -1).transpose(0, 2, 1, 3) for a in (q, k, v))
        s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
        s = np.where(mask, -np.inf, s)
        s = np.exp(s - s.max(-1, keepdims=True))
        a = (s / s.sum(-1, keepdims=True)) @ v
        x = x + conv1d(a.transpose(0, 2, 1, 3).reshape(rows, t, -1), p + ".attn.c_proj")
        h = gelu_new(conv1d(ln(x, p + ".ln_2"), p + ".mlp.c_fc"))
        x = x + conv1d(h, p + ".mlp.c_proj")
    return ln(x, "transformer.ln_f") @ w["lm_head.weight"].T


# ---- the run ----

class Env:
    pass


def setup(build):
    e = Env()
    e.build, e.tmp = build, tempfile.mkdtemp(prefix="hf_gpt2_")
    with contextlib.redirect_stdout(io.StringIO()):
        assert make_token_file.main(["--quiet", "--out-dir", f"{e.tmp}/corpus", "--vocab-size",
                                     str(V), "--eval-fraction", "0.2", *CORPUS]) == 0
    e.tokenizer = f"{e.tmp}/corpus/tokenizer.json"
    e.deck = f"{e.tmp}/deck.toml"
    with open(e.deck, "w") as f:
        f.write(f"""[model]
type = "gpt"
vocab_size = {V}
vocab_multiple = {VOCAB_MULTIPLE}
seq_len = {T}
d_model = {C}
heads = {H}
blocks = {BLOCKS}
[data]
type = "hdf5"
path = "{e.tmp}/corpus/train_*.h5"
tokenizer = "{e.tokenizer}"
[training]
steps = 3
batch_size = 4
lr = 1e-2
blas_threads = 1
[pipeline]
micro_batches = 2
predict = false
[output]
dir = "{e.tmp}/run"
checkpoint_every = 3
""")
    sh("mpirun", "--bind-to", "none", "-np", 2, f"{build}/pipetrain", "train", e.deck)
    e.ckpt = f"{e.tmp}/run/checkpoints/step_00000003"
    with h5py.File(glob.glob(f"{e.tmp}/corpus/eval_*.h5")[0]) as f:
        ids = f["tokens"][:2 * T].astype(np.int64)
    e.tokens = ids.reshape(2, T)
    e.tokens_txt = f"{e.tmp}/tokens.txt"
    np.savetxt(e.tokens_txt, e.tokens, fmt="%d")
    e.hf = f"{e.tmp}/hf"
    hf("export", e.ckpt, e.hf)
    e.logits = pipetrain_logits(e, e.ckpt)  # (2, T, V): the trained checkpoint's
    return e


def pipetrain_logits(e, ckpt, *overrides, deck=None):
    out = f"{e.tmp}/logits.f32"
    sets = [a for o in overrides for a in ("--set", o)]
    sh(f"{e.build}/pipetrain_logits", deck or e.deck, ckpt, e.tokens_txt, out, *sets)
    return np.fromfile(out, "<f4").reshape(e.tokens.shape + (V,))


def tree_bytes(d):
    return {n: open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))}


# ---- checks ----

def check_python_digest_is_pipetrains(e):
    with h5py.File(f"{e.ckpt}/manifest.h5") as m:
        assert int(m.attrs["manifest_crc32"]) == checkpoint_io.manifest_crc32(m)
        assert len(m["files"]) == 2, "2 stage files: the export reads every one"


def check_files(e):
    assert sorted(os.listdir(e.hf)) == ["config.json", "model.safetensors", "tokenizer.json",
                                        "tokenizer_config.json"]
    with open(f"{e.hf}/config.json") as f:
        cfg = json.load(f)
    want = {"model_type": "gpt2", "vocab_size": V, "n_positions": T, "n_embd": C, "n_head": H,
            "n_layer": BLOCKS, "n_inner": 4 * C, "activation_function": "gelu_new",
            "layer_norm_epsilon": 1e-5, "tie_word_embeddings": False}
    assert {k: cfg[k] for k in want} == want, cfg
    w = read_safetensors_independently(f"{e.hf}/model.safetensors")
    assert w["transformer.wte.weight"].shape == (V, C), "the real rows, not the padded 304"
    assert w["transformer.h.0.attn.c_attn.weight"].shape == (C, 3 * C), "Conv1D (in, out)"
    assert w["transformer.h.1.mlp.c_proj.weight"].shape == (4 * C, C)
    assert len(w) == 2 + 12 * BLOCKS + 3, sorted(w)
    _, weights, _ = checkpoint_io.read_checkpoint(e.ckpt)
    assert np.array_equal(w["transformer.h.1.mlp.c_fc.weight"], weights["block1.mlp.fc.weight"].T)
    with open(e.tokenizer, "rb") as a, open(f"{e.hf}/tokenizer.json", "rb") as b:
        assert a.read() == b.read(), "the run's tokenizer, byte for byte"
    with open(e.tokenizer) as f:
        eot = json.load(f)["model"]["vocab"]["<|endoftext|>"]
    assert cfg["eos_token_id"] == eot


def check_numpy_forward_matches_pipetrain(e):
    mine = gpt2_logits(e.hf, e.tokens)
    theirs = e.logits
    diff = np.abs(mine - theirs).max()
    assert diff < TOLERANCE, f"max |difference| {diff}"
    assert np.abs(theirs).max() > 0.1, "logits of a trained model are not all near zero"
    print(f"     numpy GPT-2 vs pipetrain logits: max |difference| {diff:.2e} "
          f"over {theirs.size} logits")


def check_import_and_round_trip(e):
    hf("import", e.hf, f"{e.tmp}/imp", "--data",
       f"{e.tmp}/corpus/train_*.h5")
    assert sorted(os.listdir(f"{e.tmp}/imp")) == ["checkpoint", "deck.toml", "tokenizer.json"]
    before = e.logits
    # The imported vocabulary is unpadded: the deck it wrote says so.
    after = pipetrain_logits(e, f"{e.tmp}/imp/checkpoint", deck=f"{e.tmp}/imp/deck.toml")
    assert np.array_equal(before.view("<u4"), after.view("<u4")), "imported weights' logits bitwise"
    hf("export", f"{e.tmp}/imp/checkpoint", f"{e.tmp}/hf2")
    assert tree_bytes(e.hf) == tree_bytes(f"{e.tmp}/hf2"), "export -> import -> export bitwise"
    # Padded again on import: the same logits with the run's own deck.
    hf("import", e.hf, f"{e.tmp}/imp8", "--vocab-multiple",
       VOCAB_MULTIPLE)
    padded = pipetrain_logits(e, f"{e.tmp}/imp8/checkpoint")
    assert np.array_equal(before.view("<u4"), padded.view("<u4"))


def check_emitted_deck_trains_from_import(e):
    out = sh("mpirun", "--bind-to", "none", "-np", 1, f"{e.build}/pipetrain", "train",
             f"{e.tmp}/imp/deck.toml", "--set",
             "training.steps=1", "--set", f"output.dir=\"{e.tmp}/ft\"", "--set",
             "pipeline.micro_batches=1", "--set", "training.batch_size=2", "--set",
             "pipeline.predict=false")
    assert f"weights initialised from {e.tmp}/imp/checkpoint (step 0)" in out, out


def edited_hf(e, name, config=None, drop=(), add=None):
    d = f"{e.tmp}/{name}"
    shutil.copytree(e.hf, d)
    if config:
        with open(f"{d}/config.json") as f:
            cfg = json.load(f)
        cfg.update(config)
        with open(f"{d}/config.json", "w") as f:
            json.dump(cfg, f)
    if drop or add:
        w = dict(tool.read_safetensors(f"{d}/model.safetensors"))
        for k in drop:
            del w[k]
        w.update(add or {})
        tool.write_safetensors(f"{d}/model.safetensors", w, {"format": "pt"})
    return d


def import_fails(e, d, expected):
    out = hf("import", d, f"{d}.imported", expect=2)
    assert expected in out, out
    assert not os.path.exists(f"{d}.imported"), "nothing written"


def check_refusals(e):
    cases = [
        ({"activation_function": "gelu"}, (),
         'config.json: activation_function = "gelu": pipetrain\'s GPT uses the tanh form of GELU'),
        ({"n_inner": 100}, (), "n_inner = 100: pipetrain's MLP width is model.mlp_ratio x "
         "d_model, a multiple of n_embd = 32"),
        ({"layer_norm_epsilon": 1e-6}, (), "layer_norm_epsilon = 1e-06: pipetrain's LayerNorm "
         "uses 1e-05"),
        ({"scale_attn_by_inverse_layer_idx": True}, (), "scale_attn_by_inverse_layer_idx = true"),
        ({"model_type": "llama"}, (), 'model_type = "llama": pipetrain imports GPT-2'),
        ({}, ("transformer.h.1.attn.c_attn.bias",),
         "model.safetensors: no tensor transformer.h.1.attn.c_attn.bias; pipetrain's GPT needs "
         "it for block1.attn.qkv.bias (every Linear layer but the LM head has a bias"),
        ({"n_positions": 32}, (), "tensor transformer.wpe.weight has shape [16, 32], but "
         "config.json's sizes need [32, 32]"),
    ]
    for i, (config, drop, expected) in enumerate(cases):
        import_fails(e, edited_hf(e, f"bad{i}", config, drop), expected)
    extra = edited_hf(e, "extra", add={"transformer.h.0.attn.q_norm.weight": np.ones(C, "<f4")})
    import_fails(e, extra, "tensor transformer.h.0.attn.q_norm.weight has no counterpart")


def check_tied_head_is_copied(e):
    d = edited_hf(e, "tied", {"tie_word_embeddings": True}, drop=("lm_head.weight",))
    hf("import", d, f"{d}.imported")
    _, w, _ = checkpoint_io.read_checkpoint(f"{d}.imported/checkpoint")
    assert np.array_equal(w["head.lm_head.weight"], w["embed.wte"])


def check_half_precision_weights_are_read(e):
    values = np.array([1.5, -2.0, 0.375], "<f4")  # exact in bf16 and fp16
    bf16 = (values.view("<u4") >> 16).astype("<u2").tobytes()
    f16 = values.astype("<f2").tobytes()
    header = json.dumps({"a": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]},
                         "b": {"dtype": "F16", "shape": [3], "data_offsets": [6, 12]}}).encode()
    path = f"{e.tmp}/half.safetensors"
    with open(path, "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header + bf16 + f16)
    got = tool.read_safetensors(path)
    assert got["a"].dtype == np.float32 and np.array_equal(got["a"], values)
    assert got["b"].dtype == np.float32 and np.array_equal(got["b"], values)


def check_export_refusals(e):
    mlp = f"{e.tmp}/mlp_ckpt"
    checkpoint_io.write_checkpoint(mlp, {"unit0.linear.weight": np.zeros((2, 2), "<f4")},
                          '[model]\ntype = "mlp"\n')
    out = hf("export", mlp, f"{e.tmp}/mlp_hf", expect=2)
    assert 'model.type = "mlp"; only a GPT (model.type = "gpt") maps to GPT-2' in out, out
    nodeck = f"{e.tmp}/nodeck_ckpt"
    _, weights, _ = checkpoint_io.read_checkpoint(e.ckpt)
    checkpoint_io.write_checkpoint(nodeck, weights, "")
    out = hf("export", nodeck, f"{e.tmp}/nodeck_hf", expect=2)
    assert "records no deck, so the model's sizes (model.heads) are unknown: give --deck DECK" \
        in out, out
    hf("export", nodeck, f"{e.tmp}/nodeck_hf", "--deck", e.deck)
    with open(f"{e.hf}/model.safetensors", "rb") as a, \
            open(f"{e.tmp}/nodeck_hf/model.safetensors", "rb") as b:
        assert a.read() == b.read(), "--deck gives the same export"
    wide = f"{e.tmp}/wide_deck.toml"
    with open(e.deck) as f, open(wide, "w") as g:
        g.write(f.read().replace("heads = 4", "heads = 4\nmlp_ratio = 2"))
    out = hf("export", nodeck, f"{e.tmp}/wide_hf", "--deck", wide, expect=2)
    assert "block0.mlp.fc.weight has shape [128, 32], but its deck's [model] gives [64, 32]" \
        in out, out
    bad = f"{e.tmp}/edited_ckpt"
    shutil.copytree(e.ckpt, bad)
    with h5py.File(f"{bad}/manifest.h5", "a") as m:
        m.attrs["step"] = 7
    out = hf("export", bad, f"{e.tmp}/edited_hf", expect=2)
    assert "manifest.h5: its contents have crc32" in out and "damaged or edited" in out, out


def check_logits_tool_bad_token(e):
    bad = f"{e.tmp}/bad_tokens.txt"
    with open(bad, "w") as f:
        f.write("1 2 300\n")
    out = sh(f"{e.build}/pipetrain_logits", e.deck, e.ckpt, bad, f"{e.tmp}/x.f32", expect=2)
    assert f'{bad}:1: token "300" is not an id in 0..model.vocab_size-1 = 0..299' in out, out
    out = sh("mpirun", "--bind-to", "none", "-np", 2, f"{e.build}/pipetrain_logits", e.deck,
             e.ckpt, e.tokens_txt, f"{e.tmp}/x.f32", expect=2)
    assert out.count("pipetrain_logits: error: runs as one process, not on 2 ranks") == 1, out


def main():
    build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
    os.chdir(ROOT)
    e = setup(build)
    passed = failed = 0
    try:
        for check in (check_python_digest_is_pipetrains, check_files,
                      check_numpy_forward_matches_pipetrain, check_import_and_round_trip,
                      check_emitted_deck_trains_from_import, check_refusals,
                      check_tied_head_is_copied, check_half_precision_weights_are_read,
                      check_export_refusals,
                      check_logits_tool_bad_token):
            try:
                check(e)
                passed += 1
                print(f"ok   {check.__name__}")
            except Exception:
                failed += 1
                print(f"FAIL {check.__name__}")
                traceback.print_exc()
    finally:
        shutil.rmtree(e.tmp, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
