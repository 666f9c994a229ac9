"""The public surface: what users import, documented; benchmarks stay out of the wheel."""

import importlib
import inspect
from pathlib import Path

import pytest

import sklaplace

PUBLIC_MODULES = ["sklaplace", "sklaplace.metrics", "sklaplace.ood", "sklaplace.plotting",
                  "sklaplace.distributions", "sklaplace.posterior", "sklaplace.nets",
                  "sklaplace.io", "sklaplace.acquisition"]


def test_top_level_names():
    assert set(sklaplace.__all__) == {"LaplaceClassifier", "LaplaceRegressor", "NormalPrediction",
                                      "LogitGaussianPrediction", "DirichletPrediction",
                                      "WeightPosterior", "predict_dist",
                                      "expected_failed_checks"}
    for name in sklaplace.__all__:
        assert hasattr(sklaplace, name)


def test_scorers_and_the_ood_detector_are_public():
    import sklaplace.metrics
    import sklaplace.ood

    assert {"neg_gaussian_nll_scorer", "neg_crps_scorer",
            "neg_coverage_error_scorer", "neg_per_label_nll_scorer",
            "per_label_nll"} <= set(sklaplace.metrics.__all__)
    assert "LaplaceOODDetector" in sklaplace.ood.__all__


def _public_names():
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", []):
            yield f"{module_name}:{name}"


@pytest.mark.parametrize("qualname", list(_public_names()))  # plain strings: xdist-stable ids
def test_public_objects_and_their_methods_are_documented(qualname):
    module_name, name = qualname.split(":")
    obj = getattr(importlib.import_module(module_name), name)
    assert inspect.getdoc(obj), f"{qualname} has no docstring"
    if inspect.isclass(obj):
        for name, member in vars(obj).items():
            if name.startswith("_") or not callable(member):
                continue
            assert inspect.getdoc(member), f"{qualname}.{name} has no docstring"


def test_estimator_parameters_are_documented():
    for cls in (sklaplace.LaplaceClassifier, sklaplace.LaplaceRegressor):
        doc = cls.__doc__
        for name in inspect.signature(cls).parameters:
            assert f"\n    {name} :" in doc, f"{cls.__name__} does not document {name}"


def test_benchmarks_are_not_in_the_package():
    from setuptools import find_packages

    root = Path(__file__).resolve().parents[1]
    packages = find_packages(str(root), include=["sklaplace*"])
    assert "sklaplace" in packages
    assert not any("benchmarks" in p for p in packages)
    assert (root / "benchmarks" / "__main__.py").exists()


def test_examples_and_readme_import_public_modules_only():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    for path in [root / "README.md", *sorted((root / "examples").glob("*.py"))]:
        text = path.read_text()
        assert "from sklaplace._" not in text and "import sklaplace._" not in text, path.name
