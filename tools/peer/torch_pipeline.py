#!/usr/bin/env python3
"""torch_pipeline.py: the PyTorch peer of pipetrain for jobs/bench_peer.sh.

Trains the model of a pipetrain deck with torch.distributed.pipelining
(gloo, Schedule1F1B, one process per stage, one thread per process) and
times every step the way pipetrain does: wall time of the whole pipeline per
optimizer step, measured on rank 0 between two barriers.

    MASTER_PORT=29512 mpirun -np 2 -x MASTER_PORT tools/.venv/bin/python \\
        tools/peer/torch_pipeline.py --deck RESOLVED.toml --out peer.json
    torchrun --standalone --nproc-per-node 2 tools/peer/torch_pipeline.py --deck ...

--deck is a *resolved* deck (every key present), e.g. what
`pipetrain validate DECK --ranks 2` prints, so the peer sees exactly the
model, batch, micro-batch count and optimizer settings that pipetrain runs.

What matches pipetrain (see results/bench_peer.md):
  MLP  depth x Linear(in, out) with GELU (tanh approximation) or ReLU between
       them and none after the last one; MSE (mean) or cross-entropy loss;
       the layers split evenly over the stages.
  GPT  token + position embedding (first stage), pre-LayerNorm blocks (fused
       qkv, causal multi-head attention, GELU(tanh) MLP of ratio R), final
       LayerNorm and an untied LM head without bias (last stage),
       cross-entropy over the vocabulary; the blocks split evenly.
  batch, micro-batches (N), steps; SGD (momentum, L2 weight decay) or AdamW
  (betas, eps, decoupled weight decay); linear warm-up then constant or
  cosine learning rate; global gradient-norm clipping across the stages.
Parameters follow the same distributions as pipetrain's (not the same
values); data are random tensors of the right shapes, made before the clock
starts. Same shapes, so the same FLOPs per step.

Output: one line per step on stdout (rank 0) and, with --out, a JSON file
with the per-step times, the losses, the torch version and its build
configuration.
"""
import argparse
import datetime
import json
import math
import os
import sys
import time
import tomllib
from typing import Callable, NamedTuple

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


# ---- the deck ----

def load_deck(path, steps=None):
    with open(path, "rb") as f:
        deck = tomllib.load(f)
    for section in ("model", "training", "pipeline"):
        if section not in deck:
            sys.exit(f"torch_pipeline: {path}: no [{section}] section (pass a resolved deck)")
    if steps is not None:
        deck["training"]["steps"] = steps
    return deck


def learning_rate(tr, step):
    """pipetrain's schedule: linear warm-up, then constant or cosine to min_lr."""
    lr, warm = tr["lr"], tr["warmup_steps"]
    if warm > 0 and step < warm:
        return lr * (step + 1) / warm
    if tr["lr_schedule"] == "constant":
        return lr
    decay = tr["steps"] - warm
    if decay <= 1:
        return lr
    progress = (step - warm) / (decay - 1)
    return tr["min_lr"] + 0.5 * (lr - tr["min_lr"]) * (1.0 + math.cos(math.pi * progress))


def split_units(total, stages):
    """Units per stage, as even as possible, the remainder to the first stages."""
    return [total // stages + (1 if s < total % stages else 0) for s in range(stages)]


# ---- MLP ----

def mlp_stage(m, first, count, gen):
    """Linear units first..first+count-1 of the MLP, each followed by its activation
    except the model's last one. Weights uniform with std gain/sqrt(in) (gain sqrt(2)
    before an activation, 1 for the output layer), biases zero, as pipetrain."""
    act = {"gelu": lambda: nn.GELU(approximate="tanh"), "relu": nn.ReLU}[m["activation"]]
    layers = []
    for u in range(first, first + count):
        last = u == m["depth"] - 1
        fan_in = m["input_dim"] if u == 0 else m["hidden_dim"]
        fan_out = m["output_dim"] if last else m["hidden_dim"]
        lin = nn.Linear(fan_in, fan_out)
        bound = (1.0 if last else math.sqrt(2.0)) * math.sqrt(3.0 / fan_in)
        with torch.no_grad():
            lin.weight.uniform_(-bound, bound, generator=gen)
            lin.bias.zero_()
        layers.append(lin)
        if not last:
            layers.append(act())
    return nn.Sequential(*layers)


def mlp_batches(m, tr, data, steps, gen):
    """Per step: inputs (B, in) and targets (B, out) (MSE: tanh of a random linear
    teacher; cross-entropy: its argmax), cycling over data.samples samples."""
    samples = int(data.get("samples", 4096))
    x_all = torch.randn(samples, m["input_dim"], generator=gen)
    teacher = torch.randn(m["output_dim"], m["input_dim"], generator=gen) / math.sqrt(m["input_dim"])
    z = x_all @ teacher.T
    y_all = z.argmax(dim=1) if m["loss"] == "cross_entropy" else torch.tanh(z)
    batch = tr["batch_size"]
    out = []
    for step in range(steps):
        rows = torch.arange(step * batch, (step + 1) * batch) % samples
        out.append((x_all[rows].contiguous(), y_all[rows].contiguous()))
    return out


def mlp_loss(m):
    if m["loss"] == "cross_entropy":
        return lambda pred, target: F.cross_entropy(pred, target)
    return lambda pred, target: F.mse_loss(pred, target)


# ---- GPT ----

INIT_STD = 0.02
LN_EPS = 1e-5


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + proj(attn(ln1(x))), then + mlp(ln2(x))."""

    def __init__(self, m, attention):
        super().__init__()
        c = m["d_model"]
        self.heads = m["heads"]
        self.attention = attention
        self.ln1 = nn.LayerNorm(c, eps=LN_EPS)
        self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(c, c)
        self.ln2 = nn.LayerNorm(c, eps=LN_EPS)
        self.fc = nn.Linear(c, m["mlp_ratio"] * c)
        self.fc_proj = nn.Linear(m["mlp_ratio"] * c, c)
        self.gelu = nn.GELU(approximate="tanh")

    def attend(self, qkv):
        b, t, c3 = qkv.shape
        c = c3 // 3
        d = c // self.heads
        q, k, v = (z.view(b, t, self.heads, d).transpose(1, 2) for z in qkv.split(c, dim=2))
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # explicit: full (T, T) scores, mask, softmax, as pipetrain computes them
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
            mask = torch.ones(t, t, dtype=torch.bool, device=qkv.device).tril()
            y = F.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v
        return y.transpose(1, 2).reshape(b, t, c)

    def forward(self, x):
        x = x + self.proj(self.attend(self.qkv(self.ln1(x))))
        return x + self.fc_proj(self.gelu(self.fc(self.ln2(x))))


class GptStage(nn.Module):
    """The blocks first..first+count-1, with the embedding on the first stage and
    the final LayerNorm and LM head on the last."""

    def __init__(self, m, first, count, attention, gen):
        super().__init__()
        n = m["blocks"]
        self.is_first, self.is_last = first == 0, first + count == n
        c, v, t = m["d_model"], m["vocab_size"], m["seq_len"]
        if self.is_first:
            self.wte = nn.Embedding(v, c)
            self.wpe = nn.Embedding(t, c)
        self.blocks = nn.ModuleList(Block(m, attention) for _ in range(count))
        if self.is_last:
            self.ln_f = nn.LayerNorm(c, eps=LN_EPS)
            self.lm_head = nn.Linear(c, v, bias=False)
        # GPT-2 style: N(0, 0.02), residual projections N(0, 0.02 / sqrt(2 n)),
        # biases 0, LayerNorm 1 and 0 (pipetrain's init, other random values).
        with torch.no_grad():
            for name, p in self.named_parameters():
                if ".ln" in name or name.startswith("ln_f"):
                    continue  # LayerNorm keeps weight 1, bias 0
                if name.endswith(".bias"):
                    p.zero_()
                elif name.endswith("proj.weight"):
                    p.normal_(0.0, INIT_STD / math.sqrt(2.0 * n), generator=gen)
                else:
                    p.normal_(0.0, INIT_STD, generator=gen)

    def forward(self, x):
        if self.is_first:
            pos = torch.arange(x.shape[1], device=x.device)
            x = self.wte(x) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        if self.is_last:
            x = self.lm_head(self.ln_f(x))
        return x


def gpt_batches(m, tr, steps, gen):
    """Per step: tokens (B, T) and next tokens (B, T), uniformly random."""
    out = []
    for _ in range(steps):
        seq = torch.randint(0, m["vocab_size"], (tr["batch_size"], m["seq_len"] + 1), generator=gen)
        out.append((seq[:, :-1].contiguous(), seq[:, 1:].contiguous()))
    return out


def gpt_loss(pred, target):
    return F.cross_entropy(pred.reshape(-1, pred.shape[-1]), target.reshape(-1))


# ---- optimizer ----

def make_optimizer(tr, params, impl):
    """SGD or AdamW with the deck's settings. impl: 'fused', 'foreach' or 'loop'
    (PyTorch's implementations; the same update)."""
    kw = {"fused": True} if impl == "fused" else {"foreach": impl == "foreach"}
    if tr["optimizer"] == "sgd":
        return torch.optim.SGD(params, lr=tr["lr"], momentum=tr["momentum"],
                               weight_decay=tr["weight_decay"], **kw)
    if tr["optimizer"] == "adamw":
        return torch.optim.AdamW(params, lr=tr["lr"], betas=(tr["beta1"], tr["beta2"]),
                                 eps=tr["eps"], weight_decay=tr["weight_decay"], **kw)
    sys.exit(f"torch_pipeline: unknown optimizer {tr['optimizer']!r}")


def clip_global(params, max_norm, group):
    """Global gradient-norm clipping over every stage: scale by
    max_norm / (norm + 1e-6) when the norm exceeds max_norm (as pipetrain)."""
    grads = [p.grad for p in params if p.grad is not None]
    local = torch.nn.utils.get_total_norm(grads, norm_type=2.0) if grads else torch.zeros(())
    sq = (local.double() ** 2).reshape(1)
    if dist.get_world_size() > 1:
        dist.all_reduce(sq, group=group)
    norm = float(sq.sqrt())
    if norm > max_norm:
        torch._foreach_mul_(grads, max_norm / (norm + 1e-6))
    return norm


# ---- main ----


class PeerFamily(NamedTuple):
    """How the PyTorch peer builds one model family of pipetrain's registry."""
    units_key: str            # the [model] key that counts partition units
    stage: Callable           # (model keys, first unit, units, attention, generator) -> module
    batches: Callable         # (model, training, data keys, steps, generator) -> batches
    loss: Callable            # (model keys) -> loss function
    tokens_per_sample: Callable  # (model keys) -> tokens
    uses_attention: bool


# The peer's families, by pipetrain's model.type (src/model/family_*.cpp).
PEER_FAMILIES = {
    "mlp": PeerFamily("depth", lambda m, first, n, _attention, gen: mlp_stage(m, first, n, gen),
                      mlp_batches, mlp_loss, lambda m: 1, False),
    "gpt": PeerFamily("blocks", GptStage,
                      lambda m, tr, _data, steps, gen: gpt_batches(m, tr, steps, gen),
                      lambda m: gpt_loss, lambda m: m["seq_len"], True),
}

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deck", required=True, help="resolved pipetrain deck (TOML)")
    ap.add_argument("--steps", type=int, help="override training.steps")
    ap.add_argument("--warmup", type=int, default=2, help="steps left out of the summary")
    ap.add_argument("--attention", choices=("explicit", "sdpa"), default="explicit",
                    help="GPT attention: explicit full (T, T) scores, causal mask and softmax "
                         "(default: pipetrain's FLOPs), or F.scaled_dot_product_attention, whose "
                         "causal CPU kernel may skip fully masked blocks (fewer FLOPs)")
    ap.add_argument("--optimizer-impl", choices=("fused", "foreach", "loop"), default="fused")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--timeout", type=float, default=120.0,
                    help="seconds any collective or transfer may wait")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", help="write a JSON summary here (rank 0)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    # Launched by mpirun (as jobs/bench_peer.sh does, like pipetrain) rather
    # than torchrun: take the rank and size from Open MPI's environment.
    if "RANK" not in os.environ and "OMPI_COMM_WORLD_RANK" in os.environ:
        os.environ["RANK"] = os.environ["OMPI_COMM_WORLD_RANK"]
        os.environ["WORLD_SIZE"] = os.environ["OMPI_COMM_WORLD_SIZE"]
        os.environ["LOCAL_RANK"] = os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        sys.exit("torch_pipeline: set MASTER_PORT (a free TCP port on 127.0.0.1) or use torchrun")
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    run(args, rank, world)
    dist.barrier()
    dist.destroy_process_group()
    # Leave without running the interpreter's and libraries' exit-time
    # destructors: at exit a gloo background thread can still be joinable and
    # abort the process ("terminate called without an active exception") after
    # the run has finished and written its results.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run(args, rank, world):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    deck = load_deck(args.deck, args.steps)
    m, tr, pl = deck["model"], deck["training"], deck["pipeline"]
    stages = pl.get("stages", 0) or world
    if stages != world:
        sys.exit(f"torch_pipeline: deck wants {stages} stages, {world} processes")
    if pl.get("schedule") != "1f1b":
        print(f"torch_pipeline: note: deck schedule {pl.get('schedule')!r}; the peer runs 1F1B",
              file=sys.stderr)
    n_mb, batch, steps = pl["micro_batches"], tr["batch_size"], tr["steps"]
    if batch % n_mb:
        sys.exit(f"torch_pipeline: batch {batch} not divisible by {n_mb} micro-batches")
    if steps <= args.warmup:
        sys.exit(f"torch_pipeline: {steps} steps, nothing left after {args.warmup} warm-up steps")

    # Same seed on every rank: the data are identical everywhere; each stage
    # initialises its own parameters from a generator seeded by its index.
    data_gen = torch.Generator().manual_seed(args.seed)
    init_gen = torch.Generator().manual_seed(args.seed + 1000 * (rank + 1))
    family = PEER_FAMILIES.get(m["type"])
    if family is None:
        sys.exit(f"torch_pipeline: model type {m['type']!r} has no PyTorch peer "
                 f"(peers: {', '.join(sorted(PEER_FAMILIES))})")
    units = m[family.units_key]
    if units < world:
        sys.exit(f"torch_pipeline: {units} units for {world} stages")
    counts = split_units(units, world)
    first = sum(counts[:rank])
    module = family.stage(m, first, counts[rank], args.attention, init_gen)
    batches = family.batches(m, tr, deck.get("data", {}), steps, data_gen)
    loss_fn = family.loss(m)
    tokens_per_sample = family.tokens_per_sample(m)

    device = torch.device("cpu")
    stage = PipelineStage(module, rank, world, device)
    schedule = Schedule1F1B(stage, n_microbatches=n_mb, loss_fn=loss_fn, scale_grads=True)
    params = list(module.parameters())
    optimizer = make_optimizer(tr, params, args.optimizer_impl)
    is_first, is_last = rank == 0, rank == world - 1
    clip = float(tr.get("grad_clip", 0.0))

    n_params = torch.tensor([sum(p.numel() for p in params)], dtype=torch.int64)
    dist.all_reduce(n_params)
    if rank == 0:
        print(f"torch_pipeline: torch {torch.__version__}, {world} stage(s), {m['type']}, "
              f"{int(n_params)} parameters, batch {batch}, {n_mb} micro-batches, 1F1B, "
              f"{torch.get_num_threads()} thread(s), optimizer {tr['optimizer']} "
              f"({args.optimizer_impl}), units per stage {counts}", flush=True)

    times, losses, norms = [], [], []
    for step in range(steps):
        x, y = batches[step]
        lr = learning_rate(tr, step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        step_losses = []
        dist.barrier()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        if is_first and is_last:
            schedule.step(x, target=y, losses=step_losses, return_outputs=False)
        elif is_first:
            schedule.step(x)
        elif is_last:
            schedule.step(target=y, losses=step_losses, return_outputs=False)
        else:
            schedule.step()
        norm = clip_global(params, clip, None) if clip > 0 else float("nan")
        optimizer.step()
        dist.barrier()
        elapsed = time.perf_counter() - start
        times.append(elapsed)
        norms.append(norm)
        if is_last:
            losses.append(float(torch.stack([l.detach() for l in step_losses]).mean()))
        if rank == 0:
            print(f"step {step + 1:6d}/{steps} | {batch / elapsed:9.1f} samples/s | "
                  f"{batch * tokens_per_sample / elapsed:10.0f} tokens/s | {elapsed * 1e3:8.1f} ms",
                  flush=True)

    # The losses live on the last stage: hand them to rank 0 (untimed).
    gathered = [None] * world
    dist.all_gather_object(gathered, losses)
    losses = gathered[-1]
    if rank == 0:
        timed = sorted(times[args.warmup:])
        median = timed[len(timed) // 2] if len(timed) % 2 else 0.5 * sum(timed[len(timed) // 2 - 1:len(timed) // 2 + 1])
        print(f"done: {steps} steps; loss {losses[0]:.6f} -> {losses[-1]:.6f}; median step "
              f"{median * 1e3:.1f} ms after {args.warmup} warm-up steps = {batch / median:.1f} samples/s",
              flush=True)
        if args.out:
            summary = {
                "torch_version": torch.__version__,
                "world_size": world,
                "model": m["type"],
                "batch_size": batch,
                "micro_batches": n_mb,
                "steps": steps,
                "warmup": args.warmup,
                "threads": torch.get_num_threads(),
                "attention": args.attention if family.uses_attention else None,
                "optimizer": tr["optimizer"],
                "optimizer_impl": args.optimizer_impl,
                "parameters": int(n_params),
                "step_time_s": times,
                "loss": losses,
                "grad_norm": norms,
                "median_step_time_s": median,
                "samples_per_s": batch / median,
            }
            with open(args.out, "w") as f:
                json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
