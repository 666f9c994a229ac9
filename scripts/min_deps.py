"""Print pip pins of the lower bounds that pyproject.toml declares for sklaplace's dependencies.

Each ``name>=version`` of ``[project].dependencies`` becomes ``name==version``, one per line,
so that scripts/test_min_deps.sh installs exactly what the package declares. Names given as
arguments are left out (e.g. ``torch``, which that script pins itself).

    python scripts/min_deps.py torch
"""

import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, from PyPI
    import tomli as tomllib


def lower_bounds(pyproject, exclude=()):
    """``{name: version}`` of the dependencies declared as ``name>=version``."""
    with open(pyproject, "rb") as f:
        dependencies = tomllib.load(f)["project"]["dependencies"]
    bounds = {}
    for requirement in dependencies:
        match = re.fullmatch(r"\s*([A-Za-z0-9._-]+)\s*>=\s*([0-9][0-9A-Za-z.]*)\s*", requirement)
        if match is None:
            raise SystemExit(f"{pyproject}: {requirement!r} is not of the form name>=version")
        name, version = match.groups()
        if name not in exclude:
            bounds[name] = version
    return bounds


if __name__ == "__main__":
    root = Path(__file__).resolve().parent.parent
    for name, version in lower_bounds(root / "pyproject.toml", set(sys.argv[1:])).items():
        print(f"{name}=={version}")
