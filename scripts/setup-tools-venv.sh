#!/usr/bin/env bash
# setup-tools-venv.sh: creates tools/.venv with tools/requirements.txt
# (h5py, numpy, matplotlib, tokenizers) unless it is already up to date.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=tools/.venv
stamp=$venv/.requirements.stamp
if [ -f "$stamp" ] && cmp -s tools/requirements.txt "$stamp"; then exit 0; fi
python3 -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
"$venv/bin/pip" install -q -r tools/requirements.txt
cp tools/requirements.txt "$stamp"
