"""How a default fit moves through the package: ``python scripts/trace_fit.py``.

Traces (``sys.setprofile``) a default ``LaplaceClassifier().fit`` and
``LaplaceRegressor().fit`` on small seeded data and prints, per estimator:

- the sklaplace modules entered;
- the sklaplace functions called (distinct, and the number of calls);
- the calls that cross from one sklaplace module to another, the caller being the
  nearest sklaplace frame on the stack (so a skorch callback counts from the module
  that started the training), excluding calls with both ends in ``sklaplace/_laplace/``
  (distinct pairs, and the number of calls);
- the depth of the stack, in sklaplace frames, at the first curvature computation
  (the first call of ``sklaplace._laplace.curvature.compute_posterior``).

It then prints the module-level switches of the package's source, counted statically:
module-level UPPERCASE names bound to a bool, a string or None that are themselves the
test of an ``if`` / conditional expression / ``while`` or an operand of ``and`` / ``or``
(``not`` aside), or that are compared by equality or identity to a literal; numeric ones
only in such a comparison (``DECAY_STEP != 1``). A named literal compared to a variable
(``noise == HETERO``) and a numeric budget (``rows < MIN_ROWS``) are not switches.

Options: ``--rows N`` (default 200), ``--no-trace`` (only the static count),
``--list`` (also list the modules, the crossing pairs and the switches).
"""

import argparse
import ast
import collections
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def package_dir():
    import sklaplace

    return Path(sklaplace.__file__).resolve().parent


def _module_of(filename, pkg):
    """The dotted sklaplace module of a source file, or None outside the package."""
    try:
        rel = Path(filename).resolve().relative_to(pkg.parent)
    except (ValueError, OSError):
        return None
    parts = list(rel.with_suffix("").parts)
    if parts[0] != pkg.name:  # the package's folder holds other files (scripts/, tests/)
        return None
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


class Tracer:
    """A ``sys.setprofile`` hook that records the sklaplace calls of one fit."""

    CURVATURE = ("sklaplace._laplace.curvature", "compute_posterior")

    def __init__(self, pkg):
        self.pkg = pkg
        self._modules = {}  # filename → module or None (a cache)
        self.modules = set()
        self.functions = collections.Counter()
        self.crossings = collections.Counter()
        self.curvature_depth = None

    def module(self, code):
        name = self._modules.get(code.co_filename, False)
        if name is False:
            name = self._modules[code.co_filename] = _module_of(code.co_filename, self.pkg)
        return name

    def __call__(self, frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        callee = self.module(code)
        if callee is None:
            return
        qualname = getattr(code, "co_qualname", code.co_name)
        self.modules.add(callee)
        self.functions[(callee, qualname)] += 1
        depth, caller, up = 1, None, frame.f_back
        while up is not None:
            mod = self.module(up.f_code)
            if mod is not None:
                if caller is None:
                    caller = mod
                depth += 1
            up = up.f_back
        if caller is not None and caller != callee and not (
                caller.startswith("sklaplace._laplace") and callee.startswith("sklaplace._laplace")):
            self.crossings[(caller, callee)] += 1
        if self.curvature_depth is None and (callee, code.co_name) == self.CURVATURE:
            self.curvature_depth = depth


def trace(estimator, X, y):
    """The :class:`Tracer` of ``estimator.fit(X, y)``."""
    tracer = Tracer(package_dir())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sys.setprofile(tracer)
        try:
            estimator.fit(X, y)
        finally:
            sys.setprofile(None)
    return tracer


def small_data(n_rows):
    """(classification X, y), (regression X, y): seeded, 5 features."""
    rng = np.random.RandomState(0)
    X = rng.randn(n_rows, 5)
    y_class = (X[:, 0] + 0.5 * X[:, 1] ** 2 + 0.3 * rng.randn(n_rows) > 0.5).astype(int)
    y_reg = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.randn(n_rows)
    return (X, y_class), (X, y_reg)


# ---------------------------------------------------------------- the static count
def _is_upper(name):
    stripped = name.lstrip("_")
    return bool(stripped) and stripped[0].isalpha() and stripped == stripped.upper()


def _module_constants(tree):
    """{name: kind} of module-level UPPERCASE names: "selector" (bool, str, None) or
    "number" (int, float), or "other"."""
    out = {}
    for node in tree.body:
        targets, value = [], None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        for t in targets:
            if isinstance(t, ast.Name) and _is_upper(t.id):
                kind = "other"
                if isinstance(value, ast.Constant):
                    v = value.value
                    if v is None or isinstance(v, (bool, str)):
                        kind = "selector"
                    elif isinstance(v, (int, float)):
                        kind = "number"
                elif (isinstance(value, ast.UnaryOp) and isinstance(value.operand, ast.Constant)
                      and isinstance(value.operand.value, (int, float))):
                    kind = "number"
                out[t.id] = kind
    return out


def _ref(node):
    """(module alias or None, name) of a bare ``NAME`` / ``alias.NAME`` (``not`` stripped)."""
    while isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        node = node.operand
    if isinstance(node, ast.Name):
        return None, node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return node.value.id, node.attr
    return None


def _literal(node):
    """Whether ``node`` is a literal (a constant, or a tuple / list / set of them)."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant):
        return True
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and all(map(_literal, node.elts))


_EQUALITY = (ast.Eq, ast.NotEq, ast.Is, ast.IsNot, ast.In, ast.NotIn)


def _selecting_reads(tree):
    """((alias, name), strict, line) of the reads that choose a path: a name that is the
    test of an ``if`` / conditional expression / ``while`` or an operand of a boolean
    operation (strict False), or compared by equality or identity to a literal (True)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.IfExp, ast.While)):
            operands = [node.test]
        elif isinstance(node, ast.BoolOp):
            operands = node.values
        elif isinstance(node, ast.Compare) and all(isinstance(op, _EQUALITY) for op in node.ops):
            sides = [node.left, *node.comparators]
            for i, side in enumerate(sides):
                ref = _ref(side)
                if ref is not None and all(_literal(o) for j, o in enumerate(sides) if j != i):
                    yield ref, True, node.lineno
            continue
        else:
            continue
        for operand in operands:
            ref = _ref(operand)
            if ref is not None:
                yield ref, False, operand.lineno


def switches(pkg=None):
    """[(module, name, file:line)] of the module-level switches read to choose a path."""
    pkg = pkg or package_dir()
    trees, constants = {}, {}
    for path in sorted(pkg.rglob("*.py")):
        mod = _module_of(path, pkg)
        trees[mod] = (path, ast.parse(path.read_text()))
        constants[mod] = _module_constants(trees[mod][1])
    by_name = collections.defaultdict(set)  # name → modules that define it
    for mod, names in constants.items():
        for name in names:
            by_name[name].add(mod)
    found = set()
    for mod, (path, tree) in trees.items():
        # which module an alias names: `from . import _selection as selection` etc.
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.ImportFrom, ast.Import)):
                for alias in node.names:
                    aliases[alias.asname or alias.name.split(".")[-1]] = alias.name
        for (base, name), strict, line in _selecting_reads(tree):
            if not _is_upper(name):
                continue
            if base is None:
                owner = mod if name in constants[mod] else None
            else:
                short = aliases.get(base, base).split(".")[-1]
                owner = next((m for m in by_name.get(name, ()) if m.split(".")[-1] == short),
                             None)
            if owner is None:
                continue
            kind = constants[owner][name]
            if kind == "selector" or (kind == "number" and strict):
                found.add((owner, name, f"{path.relative_to(pkg.parent)}:{line}"))
    return sorted(found)


def report(name, tracer, show):
    crossings = sum(tracer.crossings.values())
    print(f"{name}.fit:")
    print(f"  sklaplace modules entered: {len(tracer.modules)}")
    print(f"  functions called: {len(tracer.functions)} distinct, "
          f"{sum(tracer.functions.values())} calls")
    print(f"  calls across sklaplace modules (not within _laplace/): "
          f"{len(tracer.crossings)} distinct pairs, {crossings} calls")
    print(f"  stack depth (sklaplace frames) at the first curvature computation: "
          f"{tracer.curvature_depth}")
    if show:
        print("  modules: " + ", ".join(sorted(tracer.modules)))
        for (a, b), n in sorted(tracer.crossings.items()):
            print(f"    {a} -> {b}: {n}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--no-trace", action="store_true")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args(argv)
    if not args.no_trace:
        from sklaplace import LaplaceClassifier, LaplaceRegressor

        (Xc, yc), (Xr, yr) = small_data(args.rows)
        report("LaplaceClassifier()", trace(LaplaceClassifier(random_state=0), Xc, yc),
               args.list)
        report("LaplaceRegressor()", trace(LaplaceRegressor(random_state=0), Xr, yr),
               args.list)
    found = switches()
    names = sorted({(m, n) for m, n, _ in found})
    print(f"module-level switches read to choose a code path: {len(names)} names "
          f"({len(found)} reads)")
    if args.list:
        for m, n in names:
            where = ", ".join(w for mm, nn, w in found if (mm, nn) == (m, n))
            print(f"  {m}.{n}: {where}")
    return names


if __name__ == "__main__":
    main()
