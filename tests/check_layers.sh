#!/usr/bin/env bash
# check_layers.sh: fails when a source or header file includes a header from
# a higher layer of the code. The layers, lowest first (a room is a folder
# under src/ and include/pipetrain/):
#   base < tensor < model < schedule < plan < runtime < cuda < io < app
# cuda (the GPU backend and transports) implements tensor's Backend and
# runtime's Transport, so it sits above runtime; nothing below app names it.
# Also fails when a process-wide setting is set below the app layer, or when
# a tensor allocation in src/ leaves its device to the default.
# Usage: tests/check_layers.sh [REPO_ROOT]
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"

declare -A rank=([base]=0 [tensor]=1 [model]=2 [schedule]=3 [plan]=4 [runtime]=5 [cuda]=6 [io]=7 [app]=8)
bad=0
checked=0
while IFS= read -r file; do
  room=$(echo "$file" | sed -E 's#^(src|include/pipetrain)/([a-z_]+)/.*#\2#')
  if [[ -z "${rank[$room]+x}" ]]; then
    echo "check_layers: $file is in no known room ($room); add it to the layer list"
    bad=1
    continue
  fi
  checked=$((checked + 1))
  # Included rooms: "pipetrain/ROOM/x.hpp" (or <pipetrain/ROOM/x.hpp>) and,
  # inside src/, "../ROOM/x.hpp".
  while IFS= read -r inc; do
    [[ -z "$inc" ]] && continue
    target=$(echo "$inc" | sed -E 's#^(pipetrain/|\.\./)([a-z_]+)/.*#\2#')
    if [[ -z "${rank[$target]+x}" ]]; then
      echo "check_layers: $file includes \"$inc\", which is in no known room"
      bad=1
    elif (( ${rank[$target]} > ${rank[$room]} )); then
      echo "check_layers: $file ($room) includes \"$inc\" from the higher layer $target"
      bad=1
    fi
  done < <(grep -oE '#include ["<](pipetrain|\.\.)/[^">]+[">]' "$file" | sed -E 's/#include ["<](.*)[">]/\1/' || true)
done < <(find src include/pipetrain -mindepth 2 -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' \) | sort)

# The process-wide settings (the wait limit and mode, the CPU GEMM library and
# its threads) are set in one layer only: the application's, once per run
# (docs/architecture.md). A setter called from below app would be ambient
# state that one layer changes under another.
setters='\b(set_wait_limit|set_wait_mode|set_cpu_gemm|set_blas_threads)\('
while IFS= read -r hit; do
  echo "check_layers: $hit: a process-wide setting is set below the app layer"
  bad=1
done < <(grep -nE "$setters" -r src --include='*.cpp' --include='*.cu' |
           grep -vE '^src/app/' | grep -vE '^[^:]+:[0-9]+:\s*//' |
           grep -vE '^src/(base/timed_wait|tensor/cpu_gemm)\.cpp:[0-9]+:(void|inline) ' || true)

# Every tensor allocated in src/ names its device (the fourth argument of
# Tensor::empty / Tensor::zeros): the host default is for tests and host-only
# code, and a GPU run must not get a host tensor from a call that forgot it.
while IFS= read -r hit; do
  echo "check_layers: $hit: allocation without a device"
  bad=1
done < <(perl -0777 -ne '
  while (/Tensor::(?:empty|zeros)\s*(\((?:[^()]++|(?1))*\))/g) {
    my $line = 1 + (substr($_, 0, $-[0]) =~ tr/\n//);
    my $args = substr($1, 1, -1); (my $call = $&) =~ s/\s+/ /g;
    1 while $args =~ s/\([^()]*\)|\{[^{}]*\}//g;  # drop nested calls and braced shapes
    print "$ARGV:$line: $call\n" if ($args =~ tr/,//) < 3;
  }' $(find src -type f \( -name '*.cpp' -o -name '*.cu' -o -name '*.hpp' \)) || true)

# Headers directly in include/pipetrain/ or sources directly in src/ have no layer.
stray=$(find src include/pipetrain -maxdepth 1 -type f | head -5)
if [[ -n "$stray" ]]; then
  echo "check_layers: files outside every room: $stray"
  bad=1
fi
if (( checked == 0 )); then
  echo "check_layers: no files found"
  exit 1
fi
if (( bad )); then
  echo "check_layers: FAILED"
  exit 1
fi
echo "check_layers: $checked files, every include points to the same or a lower layer;" \
  "process-wide settings are set in app only; every src/ allocation names its device"
