#!/usr/bin/env bash
# Install sklaplace with its test extra and run the test suite (the README's first command).
set -euo pipefail
cd "$(dirname "$0")/.."
# It installs into the active Python environment (use a virtual environment if that matters):
# torch==2.13.0 in the same resolve keeps a CPU build of torch instead of a multi-GB CUDA one
# that backpack-for-pytorch's dependencies could otherwise pull in.
python -m pip install --quiet "torch==2.13.0" -e ".[test]"
# PyPI's torchvision (pulled in by backpack-for-pytorch) cannot be imported beside that CPU torch.
python -m pip uninstall --quiet -y torchvision || true
python -m pytest -n 2 -m "not slow" "$@"
