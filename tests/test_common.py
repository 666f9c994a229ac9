"""scikit-learn's estimator checks on several configurations."""

import contextlib
import inspect

import pytest
import torch
from sklearn.linear_model import LinearRegression
from sklearn.utils.estimator_checks import (check_estimator,
                                            check_sample_weight_equivalence_on_dense_data,
                                            parametrize_with_checks)

from sklaplace import LaplaceClassifier, LaplaceRegressor, expected_failed_checks

SMALL = dict(hidden_layer_sizes=(10,), max_epochs=20, random_state=0)

ESTIMATORS = [
    LaplaceClassifier(**SMALL),
    LaplaceRegressor(**SMALL),
    LaplaceClassifier(subset_of_weights="all", hessian_structure="full", **SMALL),
    LaplaceRegressor(hessian_structure="diag", curvature="ef", **SMALL),
    LaplaceClassifier(hessian_structure="diag", curvature="ef", **SMALL),
    LaplaceClassifier(subset_of_weights="last_layer", hessian_structure="kron",
                      link_approx="mc", n_samples=20, **SMALL),
    LaplaceRegressor(subset_of_weights="last_layer", hessian_structure="kron", pred_type="nn",
                     n_samples=20, **SMALL),
    LaplaceClassifier(solver="lbfgs", hyperparameter_tuning="evidence", **SMALL),
    LaplaceRegressor(solver="lbfgs", **SMALL),
    LaplaceRegressor(noise="heteroscedastic", **SMALL),
    LaplaceClassifier(model_averaging=True, **{**SMALL, "hidden_layer_sizes": [(), (10,)]}),
    LaplaceRegressor(model_averaging=True, **{**SMALL, "hidden_layer_sizes": [(), (10,)]}),
    # the Laplace bridge refuses an indicator y: its tags leave the multilabel checks out
    LaplaceClassifier(hessian_structure="full", link_approx="bridge", **SMALL),
]


# The class-weight check passes for every configuration: the default held-out tuning ("cv")
# trains up to 20 epochs on 80 % of the rows and continues up to 20 more on all of them (a
# warm start), enough for the check's noisy blobs; L-BFGS fits them in 20.
ADAM_XFAIL = {}

# The check's 15 rows fit one batch (batch_size=128), so Adam is full-batch and, like L-BFGS,
# deterministic: weights equal duplicated rows up to rounding. It runs in float64 because the
# check's rtol=1e-7 is float32's own rounding (in float32 some configurations pass, others
# miss by ~5e-7). The tuned δ and σ are stationary points of the evidence (Newton-polished,
# not just within L-BFGS-B's tolerance), so the weighted and the duplicated fit agree to
# ~1e-13 under every BLAS kernel (OPENBLAS_CORETYPE). With minibatches Adam's steps differ
# (tests/test_convergence.py).
FLOAT64_CHECKS = {"check_sample_weight_equivalence_on_dense_data"}


def strict_xfail():
    """``xfail_strict=True`` where scikit-learn has it (1.8 and later): a check expected to
    fail that passes then fails the run; earlier releases run the same checks, non-strict."""
    if "xfail_strict" in inspect.signature(parametrize_with_checks).parameters:
        return {"xfail_strict": True}
    return {}


@parametrize_with_checks(
    ESTIMATORS, expected_failed_checks=lambda est: {} if est.solver == "lbfgs" else ADAM_XFAIL,
    **strict_xfail())
def test_sklearn_compatible(estimator, check):
    if getattr(check, "func", check).__name__ not in FLOAT64_CHECKS:
        check(estimator)
        return
    with default_dtype(torch.float64):
        check(estimator)


@contextlib.contextmanager
def default_dtype(dtype):
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


SAMPLE_WEIGHT_CHECK = "check_sample_weight_equivalence_on_dense_data"


def test_expected_failed_checks_declare_the_sample_weight_check_with_its_reason():
    for est in (LaplaceClassifier(), LaplaceRegressor(noise="heteroscedastic", solver="lbfgs")):
        failed = expected_failed_checks(est)
        assert list(failed) == [SAMPLE_WEIGHT_CHECK]
        assert "float32" in failed[SAMPLE_WEIGHT_CHECK] and "float64" in failed[SAMPLE_WEIGHT_CHECK]
    assert expected_failed_checks(LinearRegression()) == {}


@pytest.mark.parametrize("Estimator", [LaplaceClassifier, LaplaceRegressor])
def test_the_defaults_fail_the_sample_weight_check_in_float32_and_pass_it_in_float64(Estimator):
    """What the declared reason says, on the default estimators: float32's rounding is coarser
    than the check's rtol=1e-7; in float64 the check's 15 rows train full batch, deterministic."""
    with pytest.raises(AssertionError, match="not equivalent to fitting with removed or repeated"):
        check_sample_weight_equivalence_on_dense_data(Estimator.__name__, Estimator())
    with default_dtype(torch.float64):
        check_sample_weight_equivalence_on_dense_data(Estimator.__name__, Estimator())


def test_check_estimator_passes_with_the_declared_failure():
    """check_estimator as the README writes it: every check passes but the declared one,
    which fails here (float32) and is reported as the expected failure, with its reason."""
    est = LaplaceRegressor(**SMALL)
    results = check_estimator(est, expected_failed_checks=expected_failed_checks(est),
                              on_fail=None, on_skip=None)
    status = {r["check_name"]: r["status"] for r in results}
    assert status.pop(SAMPLE_WEIGHT_CHECK) == "xfail"
    assert set(status.values()) <= {"passed", "skipped"}  # skipped: array API (SCIPY_ARRAY_API)
    reasons = {r["expected_to_fail_reason"] for r in results if r["status"] == "xfail"}
    assert reasons == {expected_failed_checks(est)[SAMPLE_WEIGHT_CHECK]}


def test_class_weight_check_passes_with_enough_training():
    from sklearn.utils.estimator_checks import check_class_weight_classifiers

    check_class_weight_classifiers(
        "LaplaceClassifier", LaplaceClassifier(hidden_layer_sizes=(10,), max_epochs=300,
                                               random_state=0))
