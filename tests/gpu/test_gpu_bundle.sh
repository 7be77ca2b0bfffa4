#!/usr/bin/env bash
# test_gpu_bundle.sh: rehearses the GPU check's bundle on this CPU machine as
# the GPU machine will see it (docs/gpu-check.md). In a private mount
# namespace it hides every system copy of what the bundle carries (Open MPI
# and PMIx with their components and help files, HDF5, OpenBLAS, oneDNN, ...)
# and moves NCCL and cuDNN into a Python wheel's layout, as the GPU machine
# has them; then it checks
#   1. the packed size (at most MAX_MIB, default 60 MiB),
#   2. the closure: every ELF file of the bundle loads, and each library it
#      resolves is in the bundle or one needs.txt leaves to the machine,
#   3. gpu-check.sh runs to where a GPU is needed: the loader and library
#      rows read ok, NCCL and cuDNN (which the fused attention links) are
#      found in their wheels, every test of tests.tsv ran
#      (the 2-rank ones through the bundle's mpirun) and passed or skipped
#      for want of a device, the training run and the pipeline benchmark
#      reached the device (the benchmark failed there, it did not hang), and
#      every log came back in one file, gpu-check-logs.tar.gz,
#   4. the check can fail: with one bundled library removed, the loader row
#      names it and the check stops before the tests.
#   tests/gpu/test_gpu_bundle.sh [TARBALL]   (make test-gpu-bundle; root)
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
TARBALL="${1:-$ROOT/gpu-bundle/pipetrain-gpu.tar.xz}"
MAX_MIB="${MAX_MIB:-60}"
CUDA_LIB="$(readlink -f /usr/local/cuda/lib64)"

fail() { echo "test_gpu_bundle: FAIL: $*" >&2; exit 1; }
pass() { echo "test_gpu_bundle: ok: $*"; }

# ---- inside the namespace (the script re-runs itself there) ----
# hide_system_copies B WHEEL: /dev/null over every bundled library's source,
# empty folders over Open MPI's and PMIx's; NCCL and cuDNN leave the toolkit
# for WHEEL's layout (site-packages/nvidia/*/lib), as on the GPU machine.
hide_system_copies() {
  local b=$1 wheel=$2 empty kept file from lib name
  empty=$(mktemp -d)
  for lib in libnccl.so.2 libcudnn.so.9; do
    name=${lib#lib}
    name=${name%%.so*}  # nccl, cudnn: site-packages/nvidia/nccl/lib/libnccl.so.2
    mkdir -p "$wheel/nvidia/$name/lib"
    touch "$wheel/nvidia/$name/lib/$lib"
    mount --bind "$CUDA_LIB/$lib" "$wheel/nvidia/$name/lib/$lib"
  done
  kept=$(mktemp -d)  # the toolkit's library folder less NCCL and cuDNN
  for file in "$CUDA_LIB"/*; do
    name=$(basename "$file")
    case $name in libnccl*|libcudnn*) continue ;; esac
    if [ -L "$file" ]; then cp -P "$file" "$kept/"; continue; fi
    if [ -d "$file" ]; then mkdir "$kept/$name"; else touch "$kept/$name"; fi
    mount --bind "$file" "$kept/$name"
  done
  mount --rbind "$kept" "$CUDA_LIB"
  while IFS=$'\t' read -r file _ from _; do
    [ "$file" = file ] || mount --bind /dev/null "$(readlink -f "$from")"
  done <"$b/MANIFEST.tsv"
  for file in /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 /usr/share/openmpi; do
    mount --bind "$empty" "$file"
  done
  for file in /usr/bin/orterun /usr/bin/orted; do mount --bind /dev/null "$file"; done
}

# check_closure B WHEEL: every ELF file loads with the bundle's libraries; each
# library resolves into the bundle or is one that needs.txt leaves to the machine.
check_closure() {
  local b=$1 wheel=$2 f line n=0 bad=""
  export LD_LIBRARY_PATH="$b/lib:$CUDA_LIB:$wheel/nvidia/nccl/lib:$wheel/nvidia/cudnn/lib"
  while read -r f; do
    n=$((n + 1))
    while read -r line; do
      case $line in
        *"not found"*|*"too short"*) bad="$bad\n$f: $line" ;;
        *"=> $b/"*) ;;
        *"=> /"*) grep -qx "$(echo "$line" | awk '{print $1}')" "$b/needs.txt" ||
                    bad="$bad\n$f: $line (outside the bundle and not in needs.txt)" ;;
      esac
    done < <(ldd "$f" 2>&1)
  done < <(find "$b" -type f \( -perm -u+x -o -name '*.so*' \) -exec sh -c \
             'head -c 4 "$1" | grep -q ELF' _ {} \; -print | grep -v '/lib-fallback/')
  unset LD_LIBRARY_PATH
  [ -z "$bad" ] || fail "closure:$(echo -e "$bad" | head -n 20)"
  pass "closure: $n ELF files load; every library is in the bundle or in needs.txt ($(tr '\n' ' ' <"$b/needs.txt"))"
}

# row LOG TITLE: the result cell of the summary row TITLE.
row() { grep -F "| $2 |" "$1" | tail -n 1 | cut -d'|' -f3- | sed 's/ |$//; s/^ //'; }

check_run() {
  local b=$1 wheel=$2 out=$3 name cell n=0
  PYTHONPATH="$wheel" PIPETRAIN_GPU_CHECK_WITHOUT_GPU=1 LOGS="$out/logs" "$b/gpu-check.sh" \
    >"$out/check.log" 2>&1 && fail "gpu-check.sh passed without a GPU"
  tail -n 40 "$out/check.log"
  tail -n 1 "$out/check.log" | grep -q '^| verdict | FAILED' || fail "the summary is not printed last"
  # The logs come back packed, beside the summary, and nothing else is left.
  cell=$(row "$out/check.log" "logs")
  echo "$cell" | grep -q "^ok: .*gpu-check-logs.tar.gz" || fail "logs row: $cell"
  [ "$(cd "$out/logs" && ls)" = "$(printf 'gpu-check-logs.tar.gz\nsummary.md')" ] ||
    fail "loose files left beside the pack: $(ls "$out/logs")"
  mkdir "$out/unpacked"
  tar -xzf "$out/logs/gpu-check-logs.tar.gz" -C "$out/unpacked" || fail "gpu-check-logs.tar.gz does not unpack"
  cmp -s "$out/unpacked/summary.md" "$out/logs/summary.md" || fail "the pack's summary.md differs"
  row "$out/check.log" "every bundled program loads" | grep -q '^ok' || fail "loader row: $(row "$out/check.log" "every bundled program loads")"
  cell=$(row "$out/check.log" "CUDA libraries")
  echo "$cell" | grep -q "^ok" || fail "CUDA libraries row: $cell"
  echo "$cell" | grep -q "libnccl.so.2: $wheel/nvidia/nccl/lib" || fail "NCCL not found in the wheel: $cell"
  echo "$cell" | grep -q "libcudnn.so.9: $wheel/nvidia/cudnn/lib" || fail "cuDNN not found in the wheel: $cell"
  while IFS=$'\t' read -r name _; do
    n=$((n + 1))
    cell=$(row "$out/check.log" "$name")
    case $cell in
      ok*|"SKIPPED "*"no CUDA device"*) ;;
      *) fail "test $name: '$cell' ($(tail -n 5 "$out/unpacked/$name.log" 2>/dev/null))" ;;
    esac
  done <"$b/tests.tsv"
  grep -q "no CUDA device visible" "$out/unpacked/train.log" ||
    fail "the training run did not get as far as the device: $(tail -n 5 "$out/unpacked/train.log")"
  # The pipeline benchmark: 2 ranks through mpirun, a deck the application
  # accepted, then a clear failure at the device (not a timeout).
  grep -q "bench_cuda pipeline, rank [01]: no CUDA device visible" "$out/unpacked/bench_pipeline.log" ||
    fail "the pipeline benchmark did not get as far as the device: $(tail -n 5 "$out/unpacked/bench_pipeline.log")"
  row "$out/check.log" "benchmarks" | grep -q "pipeline: FAILED (rc " ||
    fail "the pipeline benchmark's row: $(row "$out/check.log" "benchmarks")"
  row "$out/check.log" "pipeline step (ms) / model TFLOP/s" | grep -qx -- "- / -" ||
    fail "the pipeline rows are not in the summary"
  pass "gpu-check.sh ran every one of $n tests up to the GPU (2-rank ones through the bundle's mpirun); the training run and the pipeline benchmark reached the device; the logs came back in gpu-check-logs.tar.gz"
}

check_failure_is_reported() {
  local b=$1 wheel=$2 out=$3 cell
  rm "$b/lib/libdnnl.so.2"
  PYTHONPATH="$wheel" LOGS="$out/logs-broken" PIPETRAIN_GPU_CHECK_WITHOUT_GPU=1 "$b/gpu-check.sh" \
    >"$out/broken.log" 2>&1 &&
    fail "gpu-check.sh passed with libdnnl.so.2 removed"
  cell=$(row "$out/broken.log" "every bundled program loads")
  [ "$cell" = "FAILED: not found: libdnnl.so.2 " ] || fail "the missing library is not named alone: $cell"
  [ -z "$(row "$out/broken.log" test_cuda_select)" ] || fail "the tests ran although a program cannot load"
  pass "a missing library is named by the loader row and stops the check: $cell"
}

inside() {
  local tmp=$1 b="$1/pipetrain-gpu" wheel="$1/site"
  hide_system_copies "$b" "$wheel"
  local seen
  seen=$(ldd "$ROOT/build-cuda/pipetrain" 2>&1 || true)
  echo "$seen" | grep -qE "too short|not found" || fail "hiding the system's libraries did not take"
  check_closure "$b" "$wheel"
  check_run "$b" "$wheel" "$tmp"
  check_failure_is_reported "$b" "$wheel" "$tmp"
}

if [ "${1:-}" = --inside ]; then
  inside "$2"
  exit 0
fi

# ---- outside: size, unpack, then the namespace ----
[ -f "$TARBALL" ] || fail "$TARBALL not found: build it with make gpu-bundle"
mib=$(( ($(stat -c %s "$TARBALL") + 1048575) / 1048576 ))
[ "$mib" -le "$MAX_MIB" ] || fail "$TARBALL is $mib MiB, over $MAX_MIB MiB"
pass "size: $mib MiB packed (limit $MAX_MIB MiB)"
[ "$(id -u)" = 0 ] || fail "the rehearsal hides system libraries with bind mounts: run it as root"
TMP=$(mktemp -d /tmp/pt-gpu-bundle.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
tar -xJf "$TARBALL" -C "$TMP"
unshare -m --propagation private "$0" --inside "$TMP"
echo "test_gpu_bundle: 4 passed, 0 failed"
