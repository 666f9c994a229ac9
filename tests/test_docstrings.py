"""numpydoc validation of the public docstrings, and the estimators' shared text agreeing.

Every public class and function of the public modules, and every public method and
property of those classes (inherited ones included: ``score``, ``get_params``, the
``set_*_request`` methods, ... are what ``help()`` and IDEs show too), is validated with
``numpydoc.validate.validate``. The codes checked are ``CHECKED_CODES``: numpydoc's codes
except those in ``UNCHECKED_CODES``, each with its reason. The two estimators write out
the parameters they share (as scikit-learn does); ``assert_docstring_consistency`` keeps
their descriptions equal, except for ``DIFFERING_*``, whose text is estimator specific.
The docstrings of what sklaplace defines must be string literals in the source.
"""

import ast
import functools
import importlib
import inspect
import textwrap

import numpydoc.validate as numpydoc_validate
import pytest
from sklearn.utils._testing import assert_docstring_consistency

from sklaplace import LaplaceClassifier, LaplaceRegressor

PUBLIC_MODULES = ["sklaplace", "sklaplace.estimators.classifier", "sklaplace.estimators.regressor",
                  "sklaplace.distributions", "sklaplace.metrics", "sklaplace.ood",
                  "sklaplace.plotting", "sklaplace.posterior",
                  "sklaplace.io", "sklaplace.acquisition"]  # sklaplace.nets: a torch Module

#: Codes not checked, and why.
UNCHECKED_CODES = {
    # No "Examples" section: the estimators' class docstrings carry the examples; one
    # per method and property would repeat them.
    "EX01",
    # No "See Also" section: cross-references where they help, not everywhere.
    "SA01",
    # No extended summary: a one-line summary is the whole story of most methods.
    "ES01",
    # Returns written as ``name : type`` (``self : LaplaceClassifier``), scikit-learn's
    # convention; numpydoc wants the bare type for a single returned value.
    "RT02",
    # No "Yields" section: nothing public is a generator (kept out so that the set below
    # names only codes that can fire here).
    "YD01",
}

#: numpydoc's codes that are checked: global layout (GL), summary (SS), parameters (PR),
#: returns (RT) and See Also descriptions (SA02-SA04).
CHECKED_CODES = {
    "GL01", "GL02", "GL03", "GL05", "GL06", "GL07", "GL08", "GL09", "GL10",
    "SS01", "SS02", "SS03", "SS04", "SS05", "SS06",
    "PR01", "PR02", "PR03", "PR04", "PR05", "PR06", "PR07", "PR08", "PR09", "PR10",
    "RT01", "RT03", "RT04", "RT05",
    "SA02", "SA03", "SA04",
}


def test_the_checked_codes_are_numpydoc_codes():
    known = set(numpydoc_validate.ERROR_MSGS)
    assert CHECKED_CODES <= known
    assert UNCHECKED_CODES <= known
    assert not CHECKED_CODES & UNCHECKED_CODES


def _is_documented_member(cls, name):
    """A public method (function, classmethod, staticmethod) or property of ``cls``."""
    if name.startswith("_"):
        return False
    static = inspect.getattr_static(cls, name)
    return callable(getattr(cls, name)) or isinstance(
        static, (property, functools.cached_property))


def _public_objects():
    """Import paths of the public classes, functions, methods and properties."""
    seen = set()
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        names = getattr(module, "__all__", None)
        if names is None:  # the estimators' modules: what they define
            names = [n for n, obj in vars(module).items() if not n.startswith("_")
                     and (inspect.isclass(obj) or inspect.isfunction(obj))
                     and obj.__module__ == module_name]
        for name in names:
            obj = getattr(module, name)
            path = f"{obj.__module__}.{obj.__qualname__}"  # where it is defined
            if path in seen:
                continue
            seen.add(path)
            yield path
            if inspect.isclass(obj):
                for member in sorted(dir(obj)):
                    if _is_documented_member(obj, member):
                        yield f"{path}.{member}"


PUBLIC_OBJECTS = list(_public_objects())


def _errors(obj):
    """The checked numpydoc errors of ``obj`` (an import path, or a numpydoc doc object)."""
    result = numpydoc_validate.validate(obj)
    return [f"{code}: {message}" for code, message in result["errors"]
            if code in CHECKED_CODES]


def test_the_public_surface_is_covered():
    expected = {
        "sklaplace.estimators.classifier.LaplaceClassifier.fit",
        "sklaplace.estimators.classifier.LaplaceClassifier.partial_fit",
        "sklaplace.estimators.classifier.LaplaceClassifier.predict_proba",
        "sklaplace.estimators.classifier.LaplaceClassifier.score",
        "sklaplace.estimators.regressor.LaplaceRegressor.predict_dist",
        "sklaplace.estimators.regressor.LaplaceRegressor.log_evidence",
        "sklaplace.distributions.NormalPrediction.std",
        "sklaplace.distributions.probit_proba",
        "sklaplace.metrics.evidence_scorer",
        "sklaplace.ood.ood_scores",
        "sklaplace.plotting.ReliabilityDisplay.from_estimator",
    }
    assert expected <= set(PUBLIC_OBJECTS)


@pytest.mark.parametrize("path", PUBLIC_OBJECTS)  # plain strings: xdist-stable ids
def test_numpydoc_validation(path):
    errors = _errors(path)
    assert not errors, f"{path}:\n" + "\n".join(errors)


def _own_definition(path):
    """The function or class that ``path`` names when sklaplace defines it, else None."""
    parts = path.split(".")
    obj = importlib.import_module(parts[0])
    for part in parts[1:]:
        obj = inspect.getattr_static(obj, part) if inspect.isclass(obj) else getattr(obj, part)
    if isinstance(obj, (classmethod, staticmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        obj = obj.fget
    obj = inspect.unwrap(getattr(obj, "fn", obj))  # available_if keeps the method in .fn
    if not (inspect.isclass(obj) or inspect.isfunction(obj)):
        return None
    return obj if obj.__module__.startswith("sklaplace") else None


@pytest.mark.parametrize("path", [p for p in PUBLIC_OBJECTS if _own_definition(p)])
def test_docstrings_are_literal(path):
    """The docstring is the string literal of the definition (what numpydoc's static
    tools and IDEs read), not one assembled at import time."""
    obj = _own_definition(path)
    node = ast.parse(textwrap.dedent(inspect.getsource(obj))).body[0]
    assert ast.get_docstring(node) == inspect.getdoc(obj), f"{path}: no literal docstring"


def _broken(X, y=None):
    """returns the broken thing

    Parameters
    ----------
    X : array-like
        Data.
    z : int
        Not a parameter.
    """
    return X


def test_the_validation_catches_a_broken_docstring():
    codes = {error[:4] for error in _errors(numpydoc_validate.get_doc_object(_broken))}
    assert {"PR01", "PR02", "RT01", "SS02", "SS03"} <= codes


#: Shared parameters whose descriptions differ: each estimator lists its own criteria
#: (``net``), its own meaning of ``"auto"`` and whether σ is tuned
#: (``hyperparameter_tuning``), the regressor has no ``"mc"`` link (``n_samples``), and
#: ``batch_size="auto"`` is the regressor's default, not the classifier's.
DIFFERING_PARAMS = ["net", "hyperparameter_tuning", "n_samples", "batch_size"]
#: Shared attributes that differ: the regressor's evidence is in the units of y, and its
#: online history records σ.
DIFFERING_ATTRS = ["log_evidence_", "evidence_history_", "estimators_"]


@pytest.mark.filterwarnings("ignore:Checking was skipped")  # one estimator's own entries
def test_estimators_share_their_parameter_text():
    assert_docstring_consistency([LaplaceClassifier, LaplaceRegressor], include_params=True,
                                 exclude_params=DIFFERING_PARAMS)
    assert_docstring_consistency([LaplaceClassifier, LaplaceRegressor], include_attrs=True,
                                 exclude_attrs=DIFFERING_ATTRS)


def _renamed(cls, method):
    """A stand-in with ``cls.method``'s docstring and a distinct name.

    ``assert_docstring_consistency`` keys the objects by ``__name__``, so two methods
    called ``fit`` would be one object to it.
    """
    def stand_in():
        pass

    stand_in.__name__ = f"{cls.__name__}.{method}"
    stand_in.__doc__ = inspect.getdoc(getattr(cls, method))
    return stand_in


#: Per method: the keyword arguments of ``assert_docstring_consistency``. ``y`` and
#: ``sample_weight`` differ (labels against targets; ``normalize_y`` uses the weights).
#: Returns are not compared: ``self`` is typed by its class (scikit-learn 1.6 has no
#: ``ignore_types``), and the returned distributions, evidences and samples differ;
#: ``predict`` returns different things altogether.
SHARED_METHODS = {
    "fit": dict(include_params=True, exclude_params=["y", "sample_weight"]),
    "partial_fit": dict(include_params=True, exclude_params=["y", "sample_weight"]),
    "log_evidence": dict(include_params=True),
    "predict_dist": dict(include_params=True),
    "sample_functions": dict(include_params=True),
}


@pytest.mark.filterwarnings("ignore:Checking was skipped")
@pytest.mark.parametrize("method", sorted(SHARED_METHODS))
def test_estimators_share_their_method_text(method):
    objects = [_renamed(cls, method) for cls in (LaplaceClassifier, LaplaceRegressor)]
    assert_docstring_consistency(objects, **SHARED_METHODS[method])
