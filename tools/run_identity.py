"""run_identity.py: the line every benchmark table opens with, naming what its
runs ran on (issue #12: figures are comparable only with their kernels named).

    tools/.venv/bin/python tools/run_identity.py runs/bench_x/metrics.h5

prints one Markdown line: the host, the CPU model, its core count and the
date; the BLAS library and the kernels OpenBLAS chose (beside the CPU's best), BLAS threads per rank, and the GEMM library
of the CPU backend, all read from the run's metrics.h5 attributes (written
by pipetrain at start, docs/outputs.md). A file that cannot be read is an
error naming it.
"""
import datetime
import os
import platform
import sys

import h5py


def text(value):
    if isinstance(value, bytes):
        return value.decode()
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    return str(value)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def identity(path):
    try:
        with h5py.File(path, "r") as f:
            a = {k: text(v) for k, v in f.attrs.items()}
    except OSError as e:
        raise SystemExit(f"run_identity: cannot read {path}: {e}")
    missing = [k for k in ("blas", "blas_core", "blas_best_core", "gemm") if k not in a]
    if missing:
        raise SystemExit(f"run_identity: {path} has no attribute(s) {', '.join(missing)} "
                         "(written by pipetrain train at start)")
    threads = a.get("blas_threads", "?")
    return (f"Machine: {platform.node()}, {cpu_model()}, {os.cpu_count()} cores; "
            f"{datetime.date.today().isoformat()}. BLAS: {a['blas']}; kernels {a['blas_core']} "
            f"(best for this CPU: {a['blas_best_core']}), {threads} thread(s) per rank; "
            f"GEMMs: {a['gemm']}.")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: run_identity.py METRICS_H5")
    print(identity(sys.argv[1]))
