#!/usr/bin/env bash
# Install exactly the lower bounds pyproject.toml declares into a fresh virtual environment
# and run the test suite there (the newest versions are scripts/test.sh's job).
#
# What it tests: numpy, scipy, scikit-learn, skorch and backpack-for-pytorch at their declared
# lower bounds (read from pyproject.toml by scripts/min_deps.py, so they cannot drift), with
# torch 2.13.0, not torch's own lower bound 2.2: torch 2.2 has no CPU wheel for this
# Python on this package index, and its CUDA builds are several GB. The [test] extra's other
# packages take whatever pip resolves beside those pins.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="$(mktemp -d)"
trap 'rm -rf "$venv"' EXIT
python -m venv "$venv"
py="$venv/bin/python"
# tomllib is Python 3.11's; scripts/min_deps.py falls back to tomli on 3.10
"$py" -c "import tomllib" 2>/dev/null || "$py" -m pip install --quiet tomli
mapfile -t pins < <("$py" scripts/min_deps.py torch)
echo "lower bounds: ${pins[*]} (with torch==2.13.0)"
# torch==2.13.0 in the same resolve keeps the CPU build (see scripts/test.sh).
# pyarrow<26: dask[dataframe] pulls pyarrow, and pyarrow 26 refuses to import beside NumPy 1.x.
"$py" -m pip install --quiet "torch==2.13.0" "${pins[@]}" "pyarrow<26" -e ".[test]"
# PyPI's torchvision (pulled in by backpack-for-pytorch) cannot be imported beside that torch.
"$py" -m pip uninstall --quiet -y torchvision || true
"$py" -m pip list --format=freeze 2>/dev/null \
    | grep -iE "^(numpy|scipy|scikit-learn|skorch|backpack-for-pytorch|torch|pandas|pyarrow|dask)=="
"$py" -m pytest -n 2 -m "not slow" "$@"
