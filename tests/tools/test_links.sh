#!/usr/bin/env bash
# test_links.sh: every relative link and image in README.md, docs/*.md and
# results/*.md names a file that exists (and, for #anchors into .md pages, a
# heading that exists).
#   tests/tools/test_links.sh
# Runs tools/check_links.py (Python 3 standard library only) from the
# repository root and exits with its status: 0 when no link is broken.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
python3 tools/check_links.py
