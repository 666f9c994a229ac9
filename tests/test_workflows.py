"""The workflows around the core (issue #35): Ctrl-C, torch's grad modes, partial_fit
with another architecture, pickles of a CUDA fit on a CPU-only machine."""

import pickle
import signal
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sklaplace import LaplaceClassifier, LaplaceRegressor

MODES = {
    "outside": None,
    "no_grad": torch.no_grad,
    "set_grad_enabled(False)": lambda: torch.set_grad_enabled(False),
    "inference_mode": torch.inference_mode,
}


def _data(n=40, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.randn(n, 3)
    return X, (X[:, 0] + 0.3 * rng.randn(n) > 0).astype(int), X @ [1.0, -1.0, 0.5] + 0.1 * rng.randn(n)


def _in_mode(mode, call):
    if MODES[mode] is None:
        return call()
    with MODES[mode]():
        return call()


def _predictions(est, X):
    """Every prediction method's numbers (numpy), in a fixed order."""
    out = [est.predict(X), est.sample_functions(X, n_samples=2, random_state=0),
           est.log_evidence()]
    if isinstance(est, LaplaceClassifier):
        dist = est.predict_dist(X)
        out += [est.predict_proba(X), est.decision_function(X), dist.logit_mean, dist.logit_cov]
    else:
        dist = est.predict_dist(X)
        out += [*est.predict(X, return_std=True), dist.mean, dist.epistemic_var]
    return out


def _assert_identical(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


# ---------------------------------------------------------------- grad modes (items 2, 3)
@pytest.mark.parametrize("mode", ["no_grad", "set_grad_enabled(False)", "inference_mode"])
@pytest.mark.parametrize("kind", ["classifier", "regressor"])
def test_fit_and_predict_in_any_grad_mode_give_the_same_numbers(kind, mode):
    """fit (evidence tuning, the regressor's online tuning) failed inside torch.no_grad()
    and prediction inside torch.inference_mode() ("element 0 of tensors does not require
    grad"); both must work there and give the numbers of a fit outside."""
    X, y_cls, y_reg = _data()
    est, y = ((LaplaceClassifier, y_cls) if kind == "classifier" else (LaplaceRegressor, y_reg))
    params = dict(hidden_layer_sizes=(4,), max_epochs=5, random_state=0,
                  hyperparameter_tuning="evidence" if kind == "classifier" else "auto")
    reference = est(**params).fit(X, y)
    expected = _predictions(reference, X)
    fitted = _in_mode(mode, lambda: est(**params).fit(X, y))
    assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
    _assert_identical(_in_mode(mode, lambda: _predictions(fitted, X)), expected)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["classifier", "regressor"]),
    hidden=st.lists(st.integers(1, 5), min_size=0, max_size=2),
    structure=st.sampled_from(["full", "diag", "kron"]),
    pred_type=st.sampled_from(["glm", "nn"]),
    fit_mode=st.sampled_from(["outside", "no_grad", "inference_mode"]),
    seed=st.integers(0, 2**16),
)
def test_property_predictions_are_the_same_in_every_grad_mode(kind, hidden, structure, pred_type,
                                                             fit_mode, seed):
    """Random small nets fitted in a random grad mode: predict_proba / predict /
    predict_dist give identical numbers outside, inside torch.no_grad() and inside
    torch.inference_mode()."""
    X, y_cls, y_reg = _data(n=30, seed=seed % 7)
    est, y = ((LaplaceClassifier, y_cls) if kind == "classifier" else (LaplaceRegressor, y_reg))
    fitted = _in_mode(fit_mode, lambda: est(
        hidden_layer_sizes=tuple(hidden), max_epochs=3, subset_of_weights="all",
        hessian_structure=structure, pred_type=pred_type, n_samples=4,
        hyperparameter_tuning="evidence", random_state=seed).fit(X, y))
    X_test = np.random.RandomState(seed).randn(7, 3)
    expected = _predictions(fitted, X_test)
    for mode in ("no_grad", "inference_mode"):
        _assert_identical(_in_mode(mode, lambda: _predictions(fitted, X_test)), expected)
