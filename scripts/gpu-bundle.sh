#!/usr/bin/env bash
# gpu-bundle.sh: builds here, on a CPU-only machine, everything the GPU check
# runs, and packs it with the runtime libraries a bare GPU machine lacks, so
# that the check needs nothing there but a driver, CUDA 13's libraries
# (toolkit or wheels) and NCCL (toolkit or wheel). docs/gpu-check.md.
#   make gpu-bundle                 (= scripts/gpu-bundle.sh)
#   BUILD=build-cuda OUT_DIR=gpu-bundle MAX_MIB=60 scripts/gpu-bundle.sh
# Makes $OUT_DIR/pipetrain-gpu.tar.xz (at most MAX_MIB MiB, else it fails)
# holding the directory pipetrain-gpu/:
#   gpu-check.sh  the check (scripts/gpu-check.sh); run it there
#   inputs/       the deck of the check's training run
#   bin/          pipetrain, bench_cuda, cuda_versions (stripped)
#   tests/        every CTest test labelled "gpu" and the loss-scaler test;
#                 tests.tsv lists how each runs (name, ranks, env, binary, args)
#   lib/          every shared library those need that is not in needs.txt
#                 (Open MPI, HDF5, OpenBLAS, oneDNN, ... as Debian built them)
#   lib-fallback/ libstdc++ and libgcc_s, used only where the machine's own
#                 are older than the binaries need
#   ompi/, pmix/  the Open MPI 4.1 runtime (mpirun, orted, its components and
#                 help files), relocated by OPAL_PREFIX / PMIX_INSTALL_PREFIX
#   needs.txt     the libraries left to the machine (glibc, CUDA, NCCL, driver)
#   MANIFEST.tsv  each bundled file with its size and Debian package
#   BUILD-INFO.txt  commit, compilers, CUDA architecture, glibc needed
# tests/gpu/test_gpu_bundle.sh rehearses it here (CI: make test-gpu-bundle).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${BUILD:-$ROOT/build-cuda}"
OUT_DIR="${OUT_DIR:-$ROOT/gpu-bundle}"
MAX_MIB="${MAX_MIB:-60}"
CUDA_ARCH="${CUDA_ARCH:-90}"
NVCC="${NVCC:-/usr/local/cuda/bin/nvcc}"
NAME=pipetrain-gpu
STAGE="$OUT_DIR/stage"
B="$STAGE/$NAME"
OMPI_PLUGINS=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
PMIX_ROOT=/usr/lib/x86_64-linux-gnu/pmix2

# Libraries the GPU machine provides: the C library family, the compiler's
# runtime (lib-fallback/ covers an older one), the driver, the CUDA runtime
# libraries (NVRTC among them) and NCCL / cuDNN (toolkit or wheels; cuDNN
# alone is hundreds of MiB). Everything else is bundled.
MACHINE_LIBS='^(linux-vdso\.so|ld-linux-x86-64\.so|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libresolv\.so|libutil\.so|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so|libcudart\.so|libcublas\.so|libcublasLt\.so|libnvrtc\.so|libnccl\.so|libcudnn[a-z_]*\.so|libnvidia-)'
# Open MPI components for networks a one-node check never uses (UCX,
# InfiniBand, PSM, libfabric, OpenSHMEM): left out with their libraries.
SKIP_PLUGIN_DEPS='libuc[ptsm]\.|libpsm|libinfinipath|libibverbs|librdmacm|libfabric|libefa|libnl-|liboshmem|libmca_common_(ucx|ofi|verbs)'

die() { echo "gpu-bundle: $*" >&2; exit 1; }

# deps FILE...: "soname path" for every library the files load (ldd's closure).
deps() {
  local f out
  for f in "$@"; do
    out=$(ldd "$f")
    if echo "$out" | grep -q "not found"; then die "$f: $(echo "$out" | grep 'not found' | head -n 3 | xargs)"; fi
    echo "$out" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
  done | sort -u
}

build_targets() {
  make -C "$ROOT" cuda
  "$NVCC" -O2 -o "$BUILD/cuda_versions" "$ROOT/scripts/cuda_versions.cpp"
}

# The gpu tests as CTest runs them, rewritten for the bundle: tests.tsv holds
# "name<TAB>ranks<TAB>env<TAB>binary<TAB>args" (ranks 0 = run directly; env:
# the K=V that mpirun's -x sets, comma-separated, or -).
list_tests() {
  (cd "$BUILD" && ctest --show-only=json-v1) | python3 -c '
import json, os, sys
for t in json.load(sys.stdin)["tests"]:
    labels = [v for p in t.get("properties", []) if p["name"] == "LABELS" for v in p["value"]]
    if "gpu" not in labels and not t["name"].startswith("test_loss_scaler_"):
        continue
    cmd, np, env = t["command"], "0", []
    if os.path.basename(cmd[0]) in ("mpirun", "mpiexec", "orterun"):
        i = cmd.index("-np")
        np, rest = cmd[i + 1], cmd[i + 2:]
        while rest[0].startswith("-"):  # mpirun options after -np: -x K=V is kept
            if rest[0] == "-x":
                env.append(rest[1])
                rest = rest[2:]
            else:
                sys.exit("gpu-bundle: test %s: mpirun option %s after -np is not understood" % (t["name"], rest[0]))
        cmd = rest
    print("\t".join([t["name"], np, ",".join(env) or "-", cmd[0]] + cmd[1:]))
'
}

copy_binaries() {
  mkdir -p "$B/bin" "$B/tests"
  local f
  for f in pipetrain bench_cuda cuda_versions; do
    [ -x "$BUILD/$f" ] || die "$BUILD/$f was not built"
    cp "$BUILD/$f" "$B/bin/"
  done
  list_tests >"$STAGE/tests.full.tsv"
  [ -s "$STAGE/tests.full.tsv" ] || die "no CTest test labelled gpu in $BUILD"
  : >"$B/tests.tsv"
  while IFS=$'\t' read -r name np env exe args; do
    [ -x "$exe" ] || die "$exe (test $name) was not built"
    cp -n "$exe" "$B/tests/"
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$np" "$env" "tests/$(basename "$exe")" "$args" >>"$B/tests.tsv"
  done <"$STAGE/tests.full.tsv"
  strip --strip-unneeded "$B"/bin/* "$B"/tests/*
}

# The Open MPI runtime, laid out as its configured paths under OPAL_PREFIX.
copy_open_mpi() {
  local libdir="$B/ompi/lib/x86_64-linux-gnu/openmpi/lib" p
  mkdir -p "$B/ompi/bin" "$libdir/openmpi3" "$B/ompi/share" "$B/pmix/lib" "$B/pmix/share"
  cp -L /usr/bin/orterun "$B/ompi/bin/mpirun"
  cp -L /usr/bin/orted "$B/ompi/bin/orted"
  for p in "$OMPI_PLUGINS"/*.so; do
    ldd "$p" | grep -Eq "$SKIP_PLUGIN_DEPS" || cp "$p" "$libdir/openmpi3/"
  done
  cp -r /usr/share/openmpi "$B/ompi/share/"
  cp -r "$PMIX_ROOT/lib/pmix" "$B/pmix/lib/"
  cp -r "$PMIX_ROOT/share/pmix" "$B/pmix/share/"
}

# Every library the binaries, tests and Open MPI load, but for MACHINE_LIBS,
# copied under the name the loader asks for; MANIFEST.tsv says where from.
copy_libraries() {
  mkdir -p "$B/lib" "$B/lib-fallback"
  local soname path pkg
  mapfile -t files < <(find "$B/bin" "$B/tests" "$B/ompi" "$B/pmix" -type f -name '*' \
    \( -perm -u+x -o -name '*.so' \) | sort)
  printf 'file\tbytes\tfrom\tdebian_package\n' >"$B/MANIFEST.tsv"
  while read -r soname path; do
    case $soname in libstdc++.so*|libgcc_s.so*) cp -L "$path" "$B/lib-fallback/$soname"; continue ;; esac
    echo "$soname" | grep -Eq "$MACHINE_LIBS" && continue
    cp -L "$path" "$B/lib/$soname"
    pkg=$(dpkg -S "$(readlink -f "$path")" 2>/dev/null | head -n 1 | cut -d: -f1-2 || true)
    printf 'lib/%s\t%s\t%s\t%s %s\n' "$soname" "$(stat -c %s "$B/lib/$soname")" "$path" \
      "${pkg:-?}" "$( [ -n "$pkg" ] && dpkg-query -W -f='${Version}' "${pkg%%:*}" 2>/dev/null)" \
      >>"$B/MANIFEST.tsv"
  done < <(deps "${files[@]}")
}

# needs.txt: the libraries the bundle leaves to the machine, with where the
# check looks for them.
write_needs() {
  find "$B/bin" "$B/tests" "$B/lib" "$B/ompi" "$B/pmix" -type f \( -perm -u+x -o -name '*.so*' \) \
    -exec ldd {} + 2>/dev/null |
    awk '$2 == "=>" {print $1}' | grep -E "$MACHINE_LIBS" | sort -u >"$B/needs.txt"
}

# glibc_needed FILES...: the newest GLIBC_x.y symbol version any file needs.
newest_version() {
  local prefix=$1; shift
  objdump -T "$@" 2>/dev/null | grep -oE "${prefix}_[0-9]+\.[0-9]+(\.[0-9]+)?" |
    sed "s/${prefix}_//" | sort -uV | tail -n 1
}

write_build_info() {
  mapfile -t elf < <(find "$B/bin" "$B/tests" "$B/lib" "$B/ompi" "$B/pmix" -type f \( -perm -u+x -o -name '*.so*' \))
  {
    echo "commit: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release; echo "$PRETTY_NAME"), $(uname -m)"
    echo "compiler: $(g++ --version | head -n 1); nvcc $("$NVCC" --version | sed -nE 's/.*release ([0-9.]+).*/\1/p')"
    echo "cuda_arch: sm_$CUDA_ARCH"
    echo "glibc_needed: $(newest_version GLIBC "${elf[@]}")"
    echo "glibcxx_needed: $(newest_version GLIBCXX "${elf[@]}")"
  } >"$B/BUILD-INFO.txt"
}

pack() {
  cp "$ROOT/scripts/gpu-check.sh" "$B/gpu-check.sh"
  mkdir -p "$B/inputs"
  cp "$ROOT/inputs/gpt_markov.toml" "$B/inputs/"
  local tarball="$OUT_DIR/$NAME.tar.xz" mib
  tar -C "$STAGE" -cf - "$NAME" | xz -T0 -6 >"$tarball.tmp"
  mv "$tarball.tmp" "$tarball"
  mib=$(( ($(stat -c %s "$tarball") + 1048575) / 1048576 ))
  echo "gpu-bundle: $tarball: $mib MiB packed ($(du -sm "$B" | cut -f1) MiB unpacked; limit $MAX_MIB MiB)"
  [ "$mib" -le "$MAX_MIB" ] || die "$tarball is $mib MiB, over the $MAX_MIB MiB limit"
}

main() {
  rm -rf "$STAGE"
  mkdir -p "$B"
  [ "${SKIP_BUILD:-0}" = 1 ] || build_targets
  copy_binaries
  copy_open_mpi
  copy_libraries
  write_needs
  write_build_info
  pack
  cat "$B/BUILD-INFO.txt"
}
main "$@"
