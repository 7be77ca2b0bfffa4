#!/usr/bin/env bash
# install-deps.sh: installs the Debian packages pipetrain needs, only if one is
# missing (so `make` stays fast once set up). Needs root or sudo.
set -euo pipefail

# With arguments, installs those packages instead (the same way): make
# test-slurm installs Slurm and munge with `install-deps.sh slurm-wlm slurm-client munge`.
packages=(
  build-essential cmake pkg-config
  ccache                              # make test reuses make cuda's objects (CMakeLists.txt)
  openmpi-bin libopenmpi-dev          # MPI (ranks, transport)
  libhdf5-openmpi-dev                 # HDF5 built against Open MPI
  zlib1g-dev                          # CRC-32 of checkpoint datasets
  libopenblas-dev                     # BLAS (CPU GEMMs with training.cpu_gemm = "openblas")
  libdnnl-dev                         # oneDNN: the default CPU GEMMs
  ocl-icd-opencl-dev                  # OpenCL, which Debian's oneDNN CMake config requires
  libgtest-dev                        # tests
  libtoml11-dev libcli11-dev          # input decks, command line
)

[ $# -gt 0 ] && packages=("$@")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
