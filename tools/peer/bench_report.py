#!/usr/bin/env python3
"""bench_report.py: results/bench_peer.md from the runs of jobs/bench_peer.sh.

    tools/.venv/bin/python tools/peer/bench_report.py --csv results/bench_peer.csv \\
        --commands runs/bench_peer/commands.txt --repeats 5 --pipetrain build/pipetrain

Reads one CSV row per run (workload, program, procs, rep, batch, ...,
median_step_s, samples_per_s, ...) and prints Markdown: per workload and
program the median and min-max of the per-run steady-state throughput on 1
and 2 processes, each program's 2-vs-1 speedup and the ratio pipetrain/peer,
with the software and machine it ran on. Program "pipetrain-step" is
pipetrain with pipeline.weight_grad = "step" (jobs/bench_peer.sh, STEP_WG).
"""
import argparse
import csv
import ctypes
import datetime
import os
import platform
import re
import statistics
import subprocess
import sys
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from run_identity import cpu_model  # noqa: E402  (tools/run_identity.py)

GOALS = {"gpt": 1.5, "mlp": 1.15}  # issue #12: pipetrain / peer at 2 stages
QUIET = 0.3  # cores used by other processes below which a run counts as quiet
PIPETRAINS = ("pipetrain", "pipetrain-step")  # pipetrain's variants, each against the peer
PROGRAM_NAMES = {"pipetrain": "pipetrain", "pipetrain-step": "pipetrain, weight_grad = step",
                 "peer": "peer"}
LABELS = {
    "mlp512": "MLP 16 x 1024^2, batch 512",
    "mlp256": "MLP 16 x 1024^2, batch 256",
    "gpt": "GPT of gpt_markov.toml, batch 32",
}


def fmt_range(values, digits=1):
    med = statistics.median(values)
    return f"{med:.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


def openblas_of(binary):
    """(path, corename, config) of the libopenblas the binary links."""
    path = "libopenblas.so.0"
    try:
        out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
        m = re.search(r"libopenblas[^ ]*\s*=>\s*(\S+)", out)
        if m:
            path = m.group(1)
    except (OSError, subprocess.CalledProcessError):
        pass
    try:
        lib = ctypes.CDLL(path)
        info = []
        for name in ("openblas_get_corename", "openblas_get_config"):
            fn = getattr(lib, name)
            fn.restype = ctypes.c_char_p
            info.append(fn().decode())
        return path, info[0], info[1]
    except (OSError, AttributeError) as e:
        return path, f"unknown ({e})", ""


def torch_info():
    import torch
    config = torch.__config__.show()
    keep = [line.strip(" -") for line in config.splitlines()
            if re.search(r"Math Kernel|MKL-DNN|oneDNN|OpenMP|CPU capability|BLAS_INFO", line)]
    blas = re.search(r"BLAS_INFO=(\w+)", config)
    return {
        "version": torch.__version__,
        "blas": blas.group(1) if blas else "unknown",
        "config": [re.sub(r",? ?LAPACK_INFO.*", "", k) if k.startswith("Build settings") else k
                   for k in keep if not k.startswith("Build settings")],
        "mkldnn": f"torch.backends.mkldnn.is_available() = {torch.backends.mkldnn.is_available()}, "
                  f"enabled = {torch.backends.mkldnn.enabled}",
        "mkl": f"torch.backends.mkl.is_available() = {torch.backends.mkl.is_available()}",
        "capability": torch.backends.cpu.get_cpu_capability(),
    }


def print_limits(p, limit_rows, rate, workloads, gemm_library, programs):
    """pipetrain's throughput against the limit its GEMM library sets (#12)."""
    p("\n## pipetrain against its GEMM limit\n")
    p("`build/bench_gemm` times, in every repetition beside the runs, the GEMMs of one "
      "micro-batch's forward + backward of the whole model alone (replayed on one core, "
      "one thread, median of 11), for each CPU GEMM library. P stages then run at most "
      "P x rows / t x N / (N + P - 1) samples/s (each stage does 1/P of the GEMMs in "
      "N + P - 1 slots). Goal (#12): the MLP at >= 90% of the limit of the library it "
      "runs on at 2 stages. [min-max] over repetitions.\n")
    p("The last column measures the same 2-stage throughput against the same GEMMs replayed "
      "on buffers laid out as the model's own matrices (every weight, gradient and "
      "activation its own memory, so the replay streams the model's footprint through the "
      "caches as training does): what is left between it and 100% is pipetrain's own "
      "overhead, the rest of the gap to the first limit is the memory traffic of a model "
      "larger than the caches.\n")
    p("With `pipeline.weight_grad = \"step\"` (rows marked so) each weight gradient is one "
      "GEMM over all the step's rows instead of one per micro-batch, and the weight "
      "gradients leave the pipeline's fill and drain, so the run can pass a limit set by "
      "the micro-batch's GEMMs.\n")
    p("| workload | GEMM library | GEMM GFLOP/s | limit, 1 process | pipetrain, 1 process | "
      "% of limit | limit, 2 stages | pipetrain, 2 stages | % of limit | "
      "% of the model-buffer limit, 2 stages |")
    p("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for w in workloads:
        for lib in dict.fromkeys(r["library"] for r in limit_rows if r["workload"] == w):
            rs = [r for r in limit_rows if r["workload"] == w and r["library"] == lib]
            l1 = {int(r["rep"]): float(r["limit_1"]) for r in rs}
            l2 = {int(r["rep"]): float(r["limit_2"]) for r in rs}
            gf = [float(r["gemm_gflops"]) for r in rs]
            m2 = {int(r["rep"]): float(r["model_limit_2"]) for r in rs if r.get("model_limit_2")}
            ran_on = lib == gemm_library
            for prog in [q for q in programs if q in PIPETRAINS] if ran_on else ["pipetrain"]:
                cells = []
                for procs, lim in ((1, l1), (2, l2)):
                    got = rate.get((w, prog, procs), {})
                    share = [100.0 * got[k] / lim[k] for k in sorted(got) if k in lim]
                    cells += [fmt_range(list(lim.values())),
                              fmt_range(list(got.values())) if ran_on and got else "-",
                              fmt_range(share) if ran_on and share else "-"]
                got2 = rate.get((w, prog, 2), {})
                share2 = [100.0 * got2[k] / m2[k] for k in sorted(got2) if k in m2]
                cells.append(fmt_range(share2) if ran_on and share2 else "-")
                label = lib + (" -- **weight_grad = step**" if prog == "pipetrain-step" else "")
                p(f"| {LABELS.get(w, w)} | {label} | {fmt_range(gf)} | " + " | ".join(cells) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", required=True)
    ap.add_argument("--commands", required=True)
    ap.add_argument("--repeats", required=True)
    ap.add_argument("--pipetrain", default="build/pipetrain")
    ap.add_argument("--limits", help="bench_gemm limits CSV (jobs/bench_peer.sh)")
    args = ap.parse_args()

    rows = list(csv.DictReader(open(args.csv)))
    rate = defaultdict(dict)  # (workload, program, procs) -> {rep: samples/s}
    step = defaultdict(list)
    meta = {}
    loads = []
    other = defaultdict(dict)  # (workload, program, procs) -> {rep: cores busy with other processes}
    for r in rows:
        key = (r["workload"], r["program"], int(r["procs"]))
        rate[key][int(r["rep"])] = float(r["samples_per_s"])
        step[key].append(1e3 * float(r["median_step_s"]))
        meta[r["workload"]] = (int(r["batch"]), int(r["warmup"]), int(r["steps"]))
        loads.append(float(r["load1_before"]))
        if r.get("other_cores"):
            other[key][int(r["rep"])] = float(r["other_cores"])
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    programs = [q for q in ("pipetrain", "pipetrain-step", "peer") if any(r["program"] == q for r in rows)]
    pipetrains = [q for q in programs if q in PIPETRAINS]

    def paired(a, b):  # per-repetition ratios a/b
        return [a[k] / b[k] for k in sorted(a) if k in b]

    def busy(key):
        v = list(other.get(key, {}).values())
        return fmt_range(v, 2) if v else "-"

    ti = torch_info()
    blas_path, corename, blas_config = openblas_of(args.pipetrain)
    p = print
    p("# pipetrain against a PyTorch peer (CPU, 1 and 2 pipeline stages)\n")
    reps_total = len({r["rep"] for r in rows})
    p(f"Command: `jobs/bench_peer.sh`, {reps_total} repetitions (`REPEATS`, default 5; "
      "`APPEND=1` adds repetitions to an earlier CSV; `WORKLOADS`, "
      "`RUN_TIMEOUT`, `QUIET_MAX_WAIT` and `QUIET_CORES` may be set too; before each "
      "workload's runs of a repetition the script waits up to `QUIET_MAX_WAIT` s for the "
      "other processes to use less than `QUIET_CORES` cores). "
      "Each repetition runs, per workload, pipetrain and the peer "
      "alternately on 2 and on 1 process (the order flips every repetition). A run's "
      "throughput is the batch over its median step time after the warm-up steps; the "
      "tables give the median over the repetitions and [min-max].\n")
    p(f"Machine: {platform.node()}, {cpu_model()}, {os.cpu_count()} cores; "
      f"{datetime.date.today().isoformat()}. **The machine was shared with other engineers "
      f"while this was measured** (1-minute load average before a run: "
      f"{min(loads):.2f} to {max(loads):.2f} on {os.cpu_count()} cores), so single runs "
      "are noisy; compare the medians." + (
          " The last column of the first table is the CPU that *other* processes used while "
          "the runs ran, in cores (the machine's busy time from `/proc/stat` less the run's "
          "own CPU time, over its wall time): 0 is a quiet machine, 1 means one of the 2 "
          "cores was taken." if other else "") + "\n")

    p("## Steady-state throughput (samples/s)\n")
    p("| workload | N | warm-up + timed steps | program | 1 process | 2 stages | "
      "step time at 2 stages (ms) | speedup 2 vs 1 | other processes (cores), 1 / 2 |")
    p("|---|---:|---:|---|---:|---:|---:|---:|---:|")
    for w in workloads:
        batch, warm, steps = meta[w]
        for prog in programs:
            one, two = rate.get((w, prog, 1), {}), rate.get((w, prog, 2), {})
            if not one or not two:
                continue
            speed = paired(two, one)
            med_speed = statistics.median(two.values()) / statistics.median(one.values())
            p(f"| {LABELS.get(w, w)} | 8 | {warm} + {steps} | {PROGRAM_NAMES[prog]} | "
              f"{fmt_range(list(one.values()))} | {fmt_range(list(two.values()))} | "
              f"{fmt_range(step[(w, prog, 2)])} | {med_speed:.2f} [{min(speed):.2f}-{max(speed):.2f}] | "
              f"{busy((w, prog, 1))} / {busy((w, prog, 2))} |")

    def ratio_of(a, b):  # (ratio of the medians, min, max of the per-repetition ratios)
        if not a or not b:
            return None
        pr = paired(a, b)
        return statistics.median(a.values()) / statistics.median(b.values()), min(pr), max(pr)

    def text(c):
        return f"{c[0]:.2f} [{c[1]:.2f}-{c[2]:.2f}]" if c else "-"

    # Per workload and pipetrain variant, the repetitions in which none of its
    # runs and the peer's shared the machine.
    quiet = {}
    for w in workloads:
        for prog in pipetrains:
            keys = [(w, q, procs) for q in (prog, "peer") for procs in (1, 2)]
            if other and all(rate.get(k) for k in keys):
                reps = [r for r in rate[keys[0]]
                        if all(r in rate[k] and other.get(k, {}).get(r, 99.0) < QUIET for k in keys)]
                quiet[(w, prog)] = {k: {r: rate[k][r] for r in reps} for k in keys} if reps else {}

    p("\n## pipetrain / peer (throughput ratio)\n")
    p("Ratio of the medians; [min-max] of the ratios of the runs of the same repetition. "
      "Goal met: *yes* when the ratio at 2 stages reaches the goal over all repetitions and "
      "over the quiet ones (next table), *no* when it misses it in both, *unclear* "
      "otherwise.\n")
    p("| workload | pipetrain | 1 process | 2 stages | 2 stages, quiet repetitions | goal at 2 stages (#12) | met |")
    p("|---|---|---:|---:|---:|---:|---|")
    for w in workloads:
        for prog in pipetrains:
            one = ratio_of(rate.get((w, prog, 1)), rate.get((w, "peer", 1)))
            two = ratio_of(rate.get((w, prog, 2)), rate.get((w, "peer", 2)))
            q = quiet.get((w, prog)) or {}
            qtwo = ratio_of(q.get((w, prog, 2)), q.get((w, "peer", 2))) if q else None
            goal = GOALS["gpt" if w.startswith("gpt") else "mlp"]
            hits = [c[0] >= goal for c in (two, qtwo) if c]
            met = "yes" if hits and all(hits) else "no" if hits and not any(hits) else "unclear"
            nq = len(next(iter(q.values()))) if q else 0
            p(f"| {LABELS.get(w, w)} | {PROGRAM_NAMES[prog]} | {text(one)} | {text(two)} | "
              f"{text(qtwo) + f' (n = {nq})' if qtwo else '- (n = 0)'} | >= {goal:.2f} | {met} |")

    if other:
        p(f"\n### Repetitions on a quiet machine (other processes < {QUIET} cores in all four runs of the variant and the peer)\n")
        p("The same numbers from only the repetitions in which no run of the workload shared "
          "the machine noticeably (other processes are independent of the program, so this "
          "selection favours neither side).\n")
        p("| workload | pipetrain | repetitions | pipetrain 2 vs 1 | peer 2 vs 1 | pipetrain / peer, 1 process | "
          "pipetrain / peer, 2 stages |")
        p("|---|---|---:|---:|---:|---:|---:|")
        for w in workloads:
            for prog in pipetrains:
                q = quiet.get((w, prog))
                if not q:
                    p(f"| {LABELS.get(w, w)} | {PROGRAM_NAMES[prog]} | 0 | - | - | - | - |")
                    continue
                p(f"| {LABELS.get(w, w)} | {PROGRAM_NAMES[prog]} | {len(next(iter(q.values())))} | "
                  f"{text(ratio_of(q[(w, prog, 2)], q[(w, prog, 1)]))} | "
                  f"{text(ratio_of(q[(w, 'peer', 2)], q[(w, 'peer', 1)]))} | "
                  f"{text(ratio_of(q[(w, prog, 1)], q[(w, 'peer', 1)]))} | "
                  f"{text(ratio_of(q[(w, prog, 2)], q[(w, 'peer', 2)]))} |")

    limit_rows = list(csv.DictReader(open(args.limits))) if args.limits else []
    # build/bench_gemm prints the default GEMM choice (the one pipetrain ran on) first.
    gemm_library = limit_rows[0]["library"] if limit_rows else None
    if limit_rows:
        print_limits(p, limit_rows, rate, workloads, gemm_library, programs)

    p("\n## What runs\n")
    p("- **pipetrain**: `build/pipetrain` on the CPU backend, 1F1B, N = 8, "
      "`training.blas_threads = 1` (one thread per rank). GEMMs: "
      f"{gemm_library or 'see metrics.h5 attribute gemm'} (`training.cpu_gemm = \"auto\"`, "
      "the default); OpenBLAS (linked; all GEMMs with `training.cpu_gemm = \"openblas\"`) "
      f"`{blas_path}`, `openblas_get_corename()` = `{corename}` ({blas_config}). "
      "Step time: `step_time_s` of `metrics.h5` (rank 0, from zeroing the gradients to "
      "the end of the optimizer step; every step holds the loss broadcast and the "
      "gradient-norm all-gather over the stages, so it spans the whole pipeline's step). "
      "**pipetrain, weight_grad = step**: the same with `pipeline.weight_grad = \"step\"`: "
      "B computes input gradients only, and each stage's weight gradients run in one pass "
      "after its last B, each a GEMM over all 8 micro-batches' rows (docs/schedules.md); "
      "F and B keep 1F1B's order, and the gradient is the batch's in another summation "
      "order (not bitwise the per-micro-batch one).")
    p(f"- **peer**: `tools/peer/torch_pipeline.py`, torch {ti['version']} (the default PyPI "
      f"wheel, run on the CPU) with `torch.distributed.pipelining` (`PipelineStage`, "
      "`Schedule1F1B`, `scale_grads=True`), gloo backend, one process per stage, "
      "`torch.set_num_threads(1)`. BLAS: "
      f"{ti['blas']}; {ti['mkl']}; {ti['mkldnn']}; CPU capability {ti['capability']}. "
      "From `torch.__config__.show()`: " + "; ".join(f"`{c}`" for c in ti["config"]) + ". "
      "Step time: rank 0's wall time between a barrier before the step and a barrier "
      "after the optimizer step of every stage (zero grad, `schedule.step`, gradient "
      "clipping when the deck asks for it, `optimizer.step`).")
    p("- Both are started by the same `mpirun --oversubscribe --bind-to none` line; "
      "`OMP_NUM_THREADS=MKL_NUM_THREADS=OPENBLAS_NUM_THREADS=1`. The 1-process number of "
      "each program is the same program on one process: pipetrain with one stage, the "
      "peer with one `PipelineStage` under `Schedule1F1B` (both still run N = 8 "
      "micro-batches with gradient accumulation).")
    p("\nExact commands (P = 1 or 2; DIR, PORT, FILE per run):\n")
    p("```")
    with open(args.commands) as f:
        p(f.read().rstrip())
    p("```")

    p("\n## How the peer matches pipetrain\n")
    p("The peer reads the deck pipetrain resolves for the same run (`pipetrain validate`, "
      "every key with its default), so these are the same by construction:")
    p("- **MLP**: 16 `nn.Linear(1024, 1024)` (with bias), GELU with the tanh approximation "
      "after every layer but the last, MSE loss (mean over the batch and outputs); "
      "8 layers per stage. Weights uniform with std gain/sqrt(fan_in) (gain sqrt(2), 1 "
      "for the last layer), biases 0. SGD, lr 1e-3, momentum 0.9, no weight decay, "
      "constant learning rate, no clipping.")
    p("- **GPT**: V = 128, T = 64, C = 96, 4 heads, 4 pre-LayerNorm blocks (fused qkv "
      "Linear(C, 3C), causal attention, Linear(C, C), LayerNorm, Linear(C, 4C), GELU "
      "(tanh), Linear(4C, C)), token and position embeddings on the first stage, final "
      "LayerNorm and an untied LM head without bias on the last; cross-entropy over all "
      "B x T tokens; 2 blocks per stage; batch 32 (8 micro-batches of 4 sequences). "
      "GPT-2 init as pipetrain (N(0, 0.02), residual projections / sqrt(2 x blocks)). "
      "AdamW lr 3e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0, 10 warm-up steps "
      "then cosine to 3e-4, global gradient-norm clipping at 1.0 (the norm all-reduced "
      "over the stages). Attention: full (T, T) scores `q @ k^T / sqrt(d)`, causal "
      "mask, softmax, `@ v`, i.e. the FLOPs pipetrain does (the peer's `--attention sdpa` "
      "uses `F.scaled_dot_product_attention(is_causal=True)` instead, whose CPU kernel "
      "may skip fully masked key blocks, so fewer FLOPs; it is not used here).")
    p("- **Optimizer implementation**: `fused=True` (PyTorch's fastest CPU path; "
      "`--optimizer-impl foreach|loop` selects the others, the same update).")
    p("- **Same shapes, same FLOPs**: every GEMM, activation and loss has the shapes of "
      "pipetrain's, so both do the same arithmetic per step. The results are not bitwise "
      "equal and are not meant to be: the parameters have the same distributions but "
      "other random values, and the data are random tensors of the right shapes (MLP: "
      "normal inputs, targets tanh of a random linear teacher, like pipetrain's "
      "synthetic set; GPT: uniformly random tokens instead of the Markov chain), made "
      "before the clock starts. pipetrain reads its (cached) data inside the timed step.")
    p("- Data generation, process start, `import torch` and shape inference (first step, "
      "a warm-up step) are not timed.")


if __name__ == "__main__":
    main()
