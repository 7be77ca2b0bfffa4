#!/usr/bin/env python3
"""gpt_reference.py: the PyTorch reference for the GPT layers of pipetrain.

Builds the same tiny decoder-only transformer as include/pipetrain/model/gpt.hpp
(pre-LayerNorm blocks, causal multi-head attention on a fused qkv projection,
tanh-approximated GELU MLP, final LayerNorm, untied LM head without bias) in
float32, runs one batch forward and backward, then 5 AdamW steps on the same
batch, and writes everything to an HDF5 fixture read by
tests/test_gpt_reference.cpp.

Fixture layout (gpt_tiny.h5):
  root attributes   vocab_size, seq_len, d_model, heads, mlp_ratio, blocks,
                    batch, ln_eps, lr, beta1, beta2, eps, weight_decay,
                    adamw_steps, seed, torch_version
  /params/<name>    every parameter, float32, by the names of gpt.hpp
  /tokens  (B, T)   int32 input tokens
  /targets (B, T)   int32 next tokens (targets[b, t] = token t+1 of sequence b)
  /logits  (B, T, V) float32
  /loss    ()       float64: mean cross-entropy over all B*T tokens
  /grads/<name>     float32 gradient of /loss w.r.t. each parameter
  /adamw_losses (5) float64: loss on the same batch after AdamW update k+1,
                    k = 0..4 (update k+1 uses the gradients at the parameters
                    after update k; update 1 uses /grads)

AdamW is torch.optim.AdamW(lr, betas, eps, weight_decay, foreach=False) on
every parameter (weight decay applies to all of them, LayerNorm and biases
included), i.e. per step: p *= 1 - lr*wd; m = b1 m + (1-b1) g;
v = b2 v + (1-b2) g^2; p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps).

The parameters are not GPT-2's N(0, 0.02) init (which would leave the
attention almost uniform and the gradients tiny) but O(1)-scale random
values, so every path of the model matters: linear weights N(0, 1/fan_in)
(the two residual projections additionally / sqrt(2 * blocks)), biases
N(0, 0.1^2), LayerNorm weight 1 + N(0, 0.1^2) and bias N(0, 0.1^2),
wte N(0, 1), wpe N(0, 0.5^2).

Usage: python gpt_reference.py [--out gpt_tiny.h5]
"""
import argparse
import math
import os

import h5py
import numpy as np
import torch
import torch.nn.functional as F

DIMS = dict(vocab_size=32, seq_len=8, d_model=16, heads=2, mlp_ratio=4, blocks=2)
BATCH = 3
LN_EPS = 1e-5
ADAMW = dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, steps=5)
SEED = 1234


def param_shapes():
    """(name, shape) in the documented order of gpt.hpp."""
    V, T, C = DIMS["vocab_size"], DIMS["seq_len"], DIMS["d_model"]
    RC = DIMS["mlp_ratio"] * C
    out = [("embed.wte", (V, C)), ("embed.wpe", (T, C))]
    for i in range(DIMS["blocks"]):
        p = f"block{i}."
        out += [(p + "ln1.weight", (C,)), (p + "ln1.bias", (C,)),
                (p + "attn.qkv.weight", (3 * C, C)), (p + "attn.qkv.bias", (3 * C,)),
                (p + "attn.proj.weight", (C, C)), (p + "attn.proj.bias", (C,)),
                (p + "ln2.weight", (C,)), (p + "ln2.bias", (C,)),
                (p + "mlp.fc.weight", (RC, C)), (p + "mlp.fc.bias", (RC,)),
                (p + "mlp.proj.weight", (C, RC)), (p + "mlp.proj.bias", (C,))]
    out += [("head.ln_f.weight", (C,)), ("head.ln_f.bias", (C,)),
            ("head.lm_head.weight", (V, C))]
    return out


def init_params(gen):
    params = {}
    for name, shape in param_shapes():
        r = torch.randn(shape, generator=gen, dtype=torch.float32)
        if name == "embed.wte":
            v = r
        elif name == "embed.wpe":
            v = 0.5 * r
        elif ".ln" in name and name.endswith(".weight"):
            v = 1.0 + 0.1 * r
        elif name.endswith(".bias"):
            v = 0.1 * r
        else:  # linear weight (out, in)
            std = 1.0 / math.sqrt(shape[1])
            if name.endswith("attn.proj.weight") or name.endswith("mlp.proj.weight"):
                std /= math.sqrt(2 * DIMS["blocks"])
            v = std * r
        params[name] = v.clone().requires_grad_(True)
    return params


def attention(qkv, heads):
    """Causal multi-head attention on the fused qkv (B, T, 3C) -> (B, T, C)."""
    B, T, C3 = qkv.shape
    C = C3 // 3
    D = C // heads
    q, k, v = qkv.split(C, dim=2)
    q = q.view(B, T, heads, D).transpose(1, 2)  # (B, H, T, D)
    k = k.view(B, T, heads, D).transpose(1, 2)
    v = v.view(B, T, heads, D).transpose(1, 2)
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))  # (B, H, T, T)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    probs = F.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    y = probs @ v  # (B, H, T, D)
    return y.transpose(1, 2).contiguous().view(B, T, C)


def forward(p, tokens):
    """tokens (B, T) -> logits (B, T, V)."""
    C = DIMS["d_model"]
    T = tokens.shape[1]
    x = p["embed.wte"][tokens] + p["embed.wpe"][:T]
    for i in range(DIMS["blocks"]):
        b = f"block{i}."
        h = F.layer_norm(x, (C,), p[b + "ln1.weight"], p[b + "ln1.bias"], LN_EPS)
        qkv = F.linear(h, p[b + "attn.qkv.weight"], p[b + "attn.qkv.bias"])
        a = attention(qkv, DIMS["heads"])
        x = x + F.linear(a, p[b + "attn.proj.weight"], p[b + "attn.proj.bias"])
        h = F.layer_norm(x, (C,), p[b + "ln2.weight"], p[b + "ln2.bias"], LN_EPS)
        h = F.gelu(F.linear(h, p[b + "mlp.fc.weight"], p[b + "mlp.fc.bias"]), approximate="tanh")
        x = x + F.linear(h, p[b + "mlp.proj.weight"], p[b + "mlp.proj.bias"])
    x = F.layer_norm(x, (C,), p["head.ln_f.weight"], p["head.ln_f.bias"], LN_EPS)
    return F.linear(x, p["head.lm_head.weight"])


def loss_fn(logits, targets):
    """Mean cross-entropy over all B*T tokens."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "gpt_tiny.h5"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    gen = torch.Generator().manual_seed(SEED)
    params = init_params(gen)
    seq = torch.randint(0, DIMS["vocab_size"], (BATCH, DIMS["seq_len"] + 1), generator=gen)
    tokens, targets = seq[:, :-1].contiguous(), seq[:, 1:].contiguous()
    init_values = {n: v.detach().clone() for n, v in params.items()}

    logits = forward(params, tokens)
    loss = loss_fn(logits, targets)
    loss.backward()
    grads = {n: v.grad.detach().clone() for n, v in params.items()}

    opt = torch.optim.AdamW(list(params.values()), lr=ADAMW["lr"],
                            betas=(ADAMW["beta1"], ADAMW["beta2"]), eps=ADAMW["eps"],
                            weight_decay=ADAMW["weight_decay"], foreach=False)
    adamw_losses = []
    for _ in range(ADAMW["steps"]):
        opt.step()
        opt.zero_grad()
        step_loss = loss_fn(forward(params, tokens), targets)
        step_loss.backward()
        adamw_losses.append(step_loss.item())

    with h5py.File(args.out, "w") as f:
        for k, v in DIMS.items():
            f.attrs[k] = v
        f.attrs["batch"] = BATCH
        f.attrs["ln_eps"] = LN_EPS
        for k in ("lr", "beta1", "beta2", "eps", "weight_decay"):
            f.attrs[k] = ADAMW[k]
        f.attrs["adamw_steps"] = ADAMW["steps"]
        f.attrs["seed"] = SEED
        f.attrs["torch_version"] = str(torch.__version__)
        for name, _ in param_shapes():
            f[f"params/{name}"] = init_values[name].numpy().astype(np.float32)
            f[f"grads/{name}"] = grads[name].numpy().astype(np.float32)
        f["tokens"] = tokens.numpy().astype(np.int32)
        f["targets"] = targets.numpy().astype(np.int32)
        f["logits"] = logits.detach().numpy().astype(np.float32)
        f["loss"] = np.float64(loss.item())
        f["adamw_losses"] = np.array(adamw_losses, dtype=np.float64)
    print(f"torch {torch.__version__}: loss {loss.item():.6f}, "
          f"AdamW losses {' '.join(f'{x:.6f}' for x in adamw_losses)} -> {args.out} "
          f"({os.path.getsize(args.out)} bytes)")


if __name__ == "__main__":
    main()
