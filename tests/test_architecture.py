"""The package's structure: short modules, no import cycles, a core that
never sees an estimator, a fit that produces one immutable object.

The imports are read from the source (every ``import`` statement, also those inside
functions, which would hide a cycle from the interpreter), not from ``sys.modules``.
"""

import ast
import dataclasses
import inspect
from pathlib import Path

import numpy as np
import pytest

import sklaplace
from sklaplace import LaplaceClassifier, LaplaceRegressor
from sklaplace._laplace.fitted import FittedLaplace
from sklaplace._laplace.hyperparameters import Hyperparameters

PACKAGE = Path(sklaplace.__file__).parent
MAX_LINES = 450


def _modules():
    """{dotted name: path} of every module of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name, path):
    """The sklaplace modules ``name`` imports, anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rsplit(".", 1)[0]
            module = node.module or ""
            base = (f"{base}.{module}" if module else base) if node.level else module
            # `from X import y` imports the submodule X.y when there is one
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                       for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t in MODULES and t != name)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_is_short(name):
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines (docstrings included), > {MAX_LINES}"


def _cycles(graph):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    # a package imports its submodules (re-exports); a submodule importing its own
    # package back would close a cycle through the package's __init__
    assert _cycles(GRAPH) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_core_imports_no_estimator_module():
    core = {name for name in MODULES if name.startswith("sklaplace._laplace")}
    outside = {name: sorted(GRAPH[name] - core) for name in sorted(core)}
    assert {name: deps for name, deps in outside.items() if deps} == {}


def _signatures(name):
    """(qualified name, parameter names) of every function and method of a module."""
    tree = ast.parse(MODULES[name].read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
            yield getattr(node, "name", "<lambda>"), names


def test_nothing_in_the_core_receives_an_estimator():
    words = {"estimator", "est", "clf", "reg", "model"}
    offenders = [f"{name}.{function}({', '.join(params)})"
                 for name in MODULES if name.startswith("sklaplace._laplace")
                 for function, params in _signatures(name) if words & set(params)]
    assert offenders == []


# ---------------------------------------------------------------- the fitted object
def _data(n=40):
    rng = np.random.RandomState(0)
    X = rng.normal(size=(n, 3))
    return X, (X[:, 0] + 0.3 * rng.normal(size=n) > 0).astype(int)


def test_fit_stores_one_immutable_fitted_laplace_that_prediction_reads():
    X, y = _data()
    est = LaplaceClassifier(hidden_layer_sizes=(4,), max_epochs=5, random_state=0).fit(X, y)
    fitted = est.laplace_
    assert isinstance(fitted, FittedLaplace) and isinstance(fitted.hyper, Hyperparameters)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fitted.posterior = None
    # the public fitted attributes are read off it
    assert est.prior_precision_ == fitted.hyper.prior_precision
    assert (est.subset_of_weights_, est.hessian_structure_) == (fitted.kind, fitted.structure)
    assert est.hyperparameter_tuning_ == fitted.tuning
    assert est.log_evidence_ == pytest.approx(fitted.log_evidence(None, fitted.hyper.sigma))
    # another prior is another object; the fit's is unchanged
    proba = est.predict_proba(X)
    other = fitted.with_prior(1e3)
    assert other is not fitted and other.hyper.prior_precision == 1e3
    assert fitted.hyper.prior_precision == est.prior_precision_
    np.testing.assert_array_equal(est.predict_proba(X), proba)


def test_a_refit_replaces_the_fitted_object_and_keeps_none_of_the_earlier_fit():
    X, y = _data()
    est = LaplaceRegressor(hidden_layer_sizes=(4,), max_epochs=5, random_state=0,
                           hyperparameter_tuning="online", online_frequency=2)
    est.fit(X, X[:, 0])
    first = est.laplace_
    assert hasattr(est, "evidence_history_")
    est.set_params(hyperparameter_tuning="evidence").fit(X, X[:, 1])
    assert est.laplace_ is not first and not hasattr(est, "evidence_history_")
    assert est.laplace_.targets.mean == pytest.approx([X[:, 1].mean()])


def test_public_estimator_methods_do_not_reach_into_the_core_privately():
    """The estimator modules read the fitted LA through its public fields and methods."""
    for module in (sklaplace.estimators.classifier, sklaplace.estimators.regressor, sklaplace.estimators._base):
        source = inspect.getsource(module)
        assert "laplace_._" not in source


@pytest.mark.parametrize("Estimator", [LaplaceClassifier, LaplaceRegressor])
def test_prediction_parameters_are_read_when_predicting(Estimator):
    """``pred_type`` (glm ↔ nn) and ``n_samples`` set after fit act on the next prediction,
    as a fit with them would (they are the estimator's, not the fitted object's)."""
    X, y = _data(60)
    target = y if Estimator is LaplaceClassifier else X[:, 0]
    common = dict(hidden_layer_sizes=(4,), max_epochs=5, hyperparameter_tuning="evidence",
                  random_state=0)
    switched = Estimator(**common).fit(X, target).set_params(pred_type="nn", n_samples=7)
    direct = Estimator(**common, pred_type="nn", n_samples=7).fit(X, target)
    predict = ((lambda e: e.predict_proba(X)) if Estimator is LaplaceClassifier
               else (lambda e: e.predict(X, return_std=True)[1]))
    np.testing.assert_array_equal(predict(switched), predict(direct))
    np.testing.assert_array_equal(switched.sample_functions(X[:3], 2, 0),
                                  direct.sample_functions(X[:3], 2, 0))
