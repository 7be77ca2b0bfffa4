#!/usr/bin/env python3
"""cnn_reference.py: the float64 PyTorch reference for the cnn and hybrid families.

Builds five tiny networks as src/model/family_cnn.cpp and family_hybrid.cpp
build them (layers of conv_layers.hpp, hybrid_layers.hpp and gpt.hpp), with
pipetrain's parameter names, and runs one training step's forward and
backward in float64 from float32 parameters and images, split into
micro-batches as pipetrain splits a step. tests/test_cnn_reference.cpp
builds the same networks with build_stage, copies the parameters in by name
and checks its float32 logits, loss, every gradient and (batch norm) the
running statistics against these float64 values.

Networks (one HDF5 group each):
  cnn_group   model.type "cnn", group normalisation (2 groups), 2 stages of 2
              residual blocks (the second stage's first block downsamples,
              with a projection skip), batch 4 in 2 micro-batches
  cnn_batch   the same with deferred batch normalisation, batch 6 in 3
              micro-batches: each micro-batch normalised with its own
              statistics, the running statistics moved once by the step's
              (all micro-batches as one batch, unbiased variance)
  hybrid      model.type "hybrid": the cnn stem, 2 stages of 1 block, each
              pixel of the 4 x 4 feature map a token (Linear + position
              embedding), 2 causal GPT blocks, LayerNorm, the mean over
              tokens, a Linear head; batch 4 in 2 micro-batches
  hybrid_every_token  the same with model.causal = false: every token
              attends to every token
  cnn_gelu    cnn_group with model.activation = "gelu": tanh GELU in the
              stem and the blocks instead of ReLU

The network, as pipetrain computes it:
  stem       conv 3x3 (pad 1, no bias) -> norm -> act (ReLU, or tanh GELU)
  block      y = act(norm2(conv2(act(norm1(conv1(x))))) + skip(x)),
             conv1 3x3 stride s pad 1, conv2 3x3 pad 1, no biases;
             skip = x, or proj_norm(proj 1x1 stride s) when the width or
             resolution changes
  cnn head   global average pool -> Linear head.fc (classes, C) with bias
  tokens     (N, C, S, S) -> (N, S*S, C), token p = h*S + w; Linear
             tokens.proj (d, C) with bias; + tokens.pos (S*S, d)
  GPT block  as tests/reference/gpt_reference.py (pre-LN, causal attention
             on a fused qkv, tanh GELU), named block<u>. with u its unit;
             with causal = 0 the attention has no mask
  hybrid head LayerNorm head.ln -> mean over tokens -> Linear head.fc
  loss       cross-entropy, each micro-batch's sum scaled by 1 / batch
Norms: eps 1e-5, biased variance for normalising; group normalisation
over (C / groups, H, W) per image; batch normalisation per channel over
the micro-batch's images and pixels; momentum 0.1.

Parameters are O(1) random float32 values, not pipetrain's initialisation,
so that every path matters: conv weights N(0, 2 / fan_in), Linear weights
N(0, 1 / fan_in), biases N(0, 0.1^2), norm gains 1 + N(0, 0.1^2) and shifts
N(0, 0.1^2), position embeddings N(0, 0.5^2), running means N(0, 0.1^2)
and variances 1 + |N(0, 0.1^2)|. Images N(0, 1), labels uniform.

Fixture layout (cnn_tiny.h5), per group:
  attributes        image_size, in_channels, classes, width, stages,
                    stage_blocks, norm ("group" | "batch"), norm_groups,
                    activation ("relu" | "gelu"), batch, micro_batches; hybrid also d_model, heads,
                    blocks, mlp_ratio, causal (1 or 0)
  /params/<name>    float32, every parameter (running statistics included)
  /images (B, C, H, W) float32;  /labels (B) int32
  /logits (B, classes) float64;  /loss () float64: mean over the batch
  /grads/<name>     float64 gradient of /loss (not for running statistics)
  /running/<name>   float64 running statistics after the step (batch norm)
root attribute torch_version.

Usage: python cnn_reference.py [--out cnn_tiny.h5]
"""
import argparse
import math
import os

import h5py
import numpy as np
import torch
import torch.nn.functional as F

EPS = 1e-5
MOMENTUM = 0.1
SEED = 4321

CASES = {
    "cnn_group": dict(type="cnn", image_size=8, in_channels=3, classes=5, width=4, stages=2,
                      stage_blocks=2, norm="group", norm_groups=2, batch=4, micro_batches=2),
    "cnn_batch": dict(type="cnn", image_size=8, in_channels=3, classes=5, width=4, stages=2,
                      stage_blocks=2, norm="batch", norm_groups=2, batch=6, micro_batches=3),
    "hybrid": dict(type="hybrid", image_size=8, in_channels=3, classes=5, width=4, stages=2,
                   stage_blocks=1, norm="group", norm_groups=2, batch=4, micro_batches=2,
                   d_model=8, heads=2, blocks=2, mlp_ratio=2, causal=1),
    "hybrid_every_token": dict(type="hybrid", image_size=8, in_channels=3, classes=5, width=4,
                               stages=2, stage_blocks=1, norm="group", norm_groups=2, batch=4,
                               micro_batches=2, d_model=8, heads=2, blocks=2, mlp_ratio=2,
                               causal=0),
    # Last, so that the cases above draw the same values as before it came.
    "cnn_gelu": dict(type="cnn", image_size=8, in_channels=3, classes=5, width=4, stages=2,
                     stage_blocks=2, norm="group", norm_groups=2, batch=4, micro_batches=2,
                     activation="gelu"),
}
for _case in CASES.values():
    _case.setdefault("activation", "relu")


# ---- the network's structure, as family_cnn.cpp lays it out ----

def conv_blocks(c):
    return c["stages"] * c["stage_blocks"]


def block_geometry(c, u):
    """(in width, out width, stride) of residual block u."""
    stage = u // c["stage_blocks"]
    down = u % c["stage_blocks"] == 0 and stage > 0
    out = c["width"] << stage
    return (out // 2 if down else out), out, (2 if down else 1)


def feature_side(c):
    side = c["image_size"]
    for u in range(conv_blocks(c)):
        if block_geometry(c, u)[2] == 2:
            side = (side - 1) // 2 + 1
    return side


def norm_shapes(name, ch, c):
    out = [(name + ".gamma", (ch,)), (name + ".beta", (ch,))]
    if c["norm"] == "batch":
        out += [(name + ".running_mean", (ch,)), (name + ".running_var", (ch,))]
    return out


def param_shapes(c):
    """(name, shape) of every parameter, in pipetrain's order."""
    w = c["width"]
    out = [("stem.conv.weight", (w, c["in_channels"], 3, 3))] + norm_shapes("stem.norm", w, c)
    for u in range(conv_blocks(c)):
        i, o, s = block_geometry(c, u)
        b = f"block{u}"
        out += [(b + ".conv1.weight", (o, i, 3, 3))] + norm_shapes(b + ".norm1", o, c)
        out += [(b + ".conv2.weight", (o, o, 3, 3))] + norm_shapes(b + ".norm2", o, c)
        if i != o or s != 1:
            out += [(b + ".proj.weight", (o, i, 1, 1))] + norm_shapes(b + ".proj_norm", o, c)
    last = c["width"] << (c["stages"] - 1)
    if c["type"] == "cnn":
        return out + [("head.fc.weight", (c["classes"], last)), ("head.fc.bias", (c["classes"],))]
    d, r, t = c["d_model"], c["mlp_ratio"] * c["d_model"], feature_side(c) ** 2
    out += [("tokens.proj.weight", (d, last)), ("tokens.proj.bias", (d,)), ("tokens.pos", (t, d))]
    for u in range(conv_blocks(c), conv_blocks(c) + c["blocks"]):
        p = f"block{u}."
        out += [(p + "ln1.weight", (d,)), (p + "ln1.bias", (d,)),
                (p + "attn.qkv.weight", (3 * d, d)), (p + "attn.qkv.bias", (3 * d,)),
                (p + "attn.proj.weight", (d, d)), (p + "attn.proj.bias", (d,)),
                (p + "ln2.weight", (d,)), (p + "ln2.bias", (d,)),
                (p + "mlp.fc.weight", (r, d)), (p + "mlp.fc.bias", (r,)),
                (p + "mlp.proj.weight", (d, r)), (p + "mlp.proj.bias", (d,))]
    return out + [("head.ln.weight", (d,)), ("head.ln.bias", (d,)),
                  ("head.fc.weight", (c["classes"], d)), ("head.fc.bias", (c["classes"],))]


def init_value(name, shape, gen):
    r = torch.randn(shape, generator=gen, dtype=torch.float32)
    if name.endswith(".running_mean"):
        return 0.1 * r
    if name.endswith(".running_var"):
        return 1.0 + 0.1 * r.abs()
    if name.endswith(".gamma") or (".ln" in name and name.endswith(".weight")):
        return 1.0 + 0.1 * r
    if name.endswith(".beta") or name.endswith(".bias"):
        return 0.1 * r
    if name.endswith(".pos"):
        return 0.5 * r
    fan_in = int(np.prod(shape[1:]))
    return r * math.sqrt((2.0 if len(shape) == 4 else 1.0) / fan_in)


# ---- the forward, in float64 ----

class Net:
    def __init__(self, c, params):
        self.c, self.p = c, params
        self.norm_inputs = {}  # batch norm: name -> [its input per micro-batch]

    def norm(self, name, x):
        p, c = self.p, self.c
        if c["norm"] == "group":
            return F.group_norm(x, c["norm_groups"], p[name + ".gamma"], p[name + ".beta"], EPS)
        self.norm_inputs.setdefault(name, []).append(x.detach())
        return F.batch_norm(x, None, None, p[name + ".gamma"], p[name + ".beta"], training=True,
                            eps=EPS)

    def act(self, x):
        if self.c["activation"] == "gelu":
            return F.gelu(x, approximate="tanh")
        return F.relu(x)

    def block(self, u, x):
        i, o, s = block_geometry(self.c, u)
        b, p = f"block{u}", self.p
        h = self.act(self.norm(b + ".norm1", F.conv2d(x, p[b + ".conv1.weight"], stride=s, padding=1)))
        h = self.norm(b + ".norm2", F.conv2d(h, p[b + ".conv2.weight"], padding=1))
        skip = x
        if i != o or s != 1:
            skip = self.norm(b + ".proj_norm", F.conv2d(x, p[b + ".proj.weight"], stride=s))
        return self.act(h + skip)

    def gpt_block(self, u, x):
        p, c, b = self.p, self.c, f"block{u}."
        d = c["d_model"]
        h = F.layer_norm(x, (d,), p[b + "ln1.weight"], p[b + "ln1.bias"], EPS)
        a = attention(F.linear(h, p[b + "attn.qkv.weight"], p[b + "attn.qkv.bias"]), c["heads"],
                      c["causal"])
        x = x + F.linear(a, p[b + "attn.proj.weight"], p[b + "attn.proj.bias"])
        h = F.layer_norm(x, (d,), p[b + "ln2.weight"], p[b + "ln2.bias"], EPS)
        h = F.gelu(F.linear(h, p[b + "mlp.fc.weight"], p[b + "mlp.fc.bias"]), approximate="tanh")
        return x + F.linear(h, p[b + "mlp.proj.weight"], p[b + "mlp.proj.bias"])

    def forward(self, images):
        p, c = self.p, self.c
        x = self.act(self.norm("stem.norm", F.conv2d(images, p["stem.conv.weight"], padding=1)))
        for u in range(conv_blocks(c)):
            x = self.block(u, x)
        if c["type"] == "cnn":
            return F.linear(x.mean(dim=(2, 3)), p["head.fc.weight"], p["head.fc.bias"])
        t = x.flatten(2).transpose(1, 2)  # (N, S*S, C)
        x = F.linear(t, p["tokens.proj.weight"], p["tokens.proj.bias"]) + p["tokens.pos"]
        for u in range(conv_blocks(c), conv_blocks(c) + c["blocks"]):
            x = self.gpt_block(u, x)
        x = F.layer_norm(x, (c["d_model"],), p["head.ln.weight"], p["head.ln.bias"], EPS)
        return F.linear(x.mean(dim=1), p["head.fc.weight"], p["head.fc.bias"])

    def running_after_step(self):
        """Each batch norm's running statistics moved once by the step's batch."""
        out = {}
        for name, xs in self.norm_inputs.items():
            x = torch.cat(xs).transpose(0, 1).reshape(xs[0].shape[1], -1)  # (C, all values)
            mean, var = x.mean(dim=1), x.var(dim=1, unbiased=True)
            rm, rv = self.p[name + ".running_mean"], self.p[name + ".running_var"]
            out[name + ".running_mean"] = (1 - MOMENTUM) * rm + MOMENTUM * mean
            out[name + ".running_var"] = (1 - MOMENTUM) * rv + MOMENTUM * var
        return out


def attention(qkv, heads, causal):
    """Multi-head attention on the fused qkv (B, T, 3C) -> (B, T, C), causal or over every token."""
    B, T, C3 = qkv.shape
    C = C3 // 3
    D = C // heads
    q, k, v = (z.view(B, T, heads, D).transpose(1, 2) for z in qkv.split(C, dim=2))
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(D)
    if causal:
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = F.softmax(scores, dim=-1)
    return (probs @ v).transpose(1, 2).contiguous().view(B, T, C)


def run_case(name, c, gen, f):
    shapes = param_shapes(c)
    values = {n: init_value(n, s, gen) for n, s in shapes}
    images = torch.randn((c["batch"], c["in_channels"], c["image_size"], c["image_size"]),
                         generator=gen, dtype=torch.float32)
    labels = torch.randint(0, c["classes"], (c["batch"],), generator=gen)
    params = {n: v.double().requires_grad_(".running_" not in n)
              for n, v in values.items()}
    net = Net(c, params)
    rows = c["batch"] // c["micro_batches"]
    logits, loss = [], 0.0
    for m in range(c["micro_batches"]):
        out = net.forward(images[m * rows:(m + 1) * rows].double())
        mb_loss = F.cross_entropy(out, labels[m * rows:(m + 1) * rows], reduction="sum") / c["batch"]
        mb_loss.backward()
        logits.append(out.detach())
        loss += mb_loss.item()
    g = f.create_group(name)
    for k, v in c.items():
        g.attrs[k] = v
    for n, _ in shapes:
        g[f"params/{n}"] = values[n].numpy().astype(np.float32)
        if params[n].requires_grad:
            g[f"grads/{n}"] = params[n].grad.numpy()
    for n, v in net.running_after_step().items():
        g[f"running/{n}"] = v.detach().numpy()
    g["images"] = images.numpy()
    g["labels"] = labels.numpy().astype(np.int32)
    g["logits"] = torch.cat(logits).numpy()
    g["loss"] = np.float64(loss)
    print(f"  {name}: {len(shapes)} parameters, loss {loss:.6f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "cnn_tiny.h5"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    gen = torch.Generator().manual_seed(SEED)
    with h5py.File(args.out, "w") as f:
        f.attrs["torch_version"] = str(torch.__version__)
        for name, c in CASES.items():
            run_case(name, c, gen, f)
    print(f"torch {torch.__version__} -> {args.out} ({os.path.getsize(args.out)} bytes)")


if __name__ == "__main__":
    main()
