"""EvidenceCurveDisplay: log evidence and held-out NLL against δ, under Agg."""

import numpy as np
import pytest
import torch
from skorch import NeuralNetRegressor
from sklearn.frozen import FrozenEstimator
from sklearn.metrics import log_loss
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from torch import nn

from sklaplace import LaplaceClassifier, LaplaceRegressor
from sklaplace.metrics import gaussian_nll

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from sklaplace.plotting import EvidenceCurveDisplay  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _frozen_linear(d):
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(d, 1)).double()
    return FrozenEstimator(NeuralNetRegressor(module, criterion=nn.MSELoss).initialize())


def _regression(n=50, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return X, X @ np.array([1.0, -0.5, 0.2]) + 0.3 * rng.normal(size=n)


def test_regressor_curves_equal_the_evidence_and_refits_at_each_prior():
    X, y = _regression()
    X_val, y_val = _regression(n=30, seed=1)
    common = dict(subset_of_weights="all", hessian_structure="full", normalize_y=False)
    reg = LaplaceRegressor(_frozen_linear(3), hyperparameter_tuning="evidence", **common).fit(X, y)
    before = reg.predict(X_val, return_std=True)
    grid = [0.01, 0.3, 5.0]
    disp = EvidenceCurveDisplay.from_estimator(reg, X_val, y_val, prior_precisions=grid)
    np.testing.assert_allclose(disp.log_evidence, [reg.log_evidence(prior_precision=v)
                                                   for v in grid], rtol=1e-12)
    # the held-out NLL at δ is that of the estimator fitted with that δ (and the fitted σ)
    for value, nll in zip(grid, disp.validation_nll):
        refit = LaplaceRegressor(_frozen_linear(3), hyperparameter_tuning=None,
                                 prior_precision=value, sigma_noise=reg.sigma_noise_,
                                 extrapolation_variance=reg.extrapolation_variance_,
                                 **common).fit(X, y)
        assert nll == pytest.approx(gaussian_nll(y_val, *refit.predict(X_val, return_std=True)),
                                    rel=1e-9)
    assert disp.prior_precision == reg.prior_precision_
    np.testing.assert_allclose(disp.chosen_line_.get_xdata(), reg.prior_precision_)
    np.testing.assert_allclose(disp.line_.get_ydata(), disp.log_evidence)
    np.testing.assert_allclose(disp.nll_line_.get_ydata(), disp.validation_nll)
    assert disp.ax_.get_xscale() == "log"
    after = reg.predict(X_val, return_std=True)  # the estimator is not changed
    np.testing.assert_array_equal(before[1], after[1])


def test_classifier_default_grid_marks_the_chosen_prior():
    rng = np.random.RandomState(0)
    X = rng.randn(80, 3)
    y = np.array(["a", "b", "c"])[np.argmax(X + 0.5 * rng.randn(80, 3), axis=1)]
    pipe = make_pipeline(StandardScaler(), LaplaceClassifier(
        hidden_layer_sizes=(5,), max_epochs=10, hyperparameter_tuning="evidence",
        random_state=0)).fit(X[:60], y[:60])
    clf = pipe[-1]
    fig, ax = plt.subplots()
    disp = EvidenceCurveDisplay.from_estimator(pipe, X[60:], y[60:], ax=ax)
    assert disp.ax_ is ax and disp.figure_ is fig
    assert clf.prior_precision_ in disp.prior_precisions
    assert disp.prior_precisions.min() == pytest.approx(1e-4)
    assert disp.prior_precisions.max() == pytest.approx(1e4)
    at = np.flatnonzero(disp.prior_precisions == clf.prior_precision_)[0]
    assert disp.log_evidence[at] == pytest.approx(clf.log_evidence_, rel=1e-10)
    assert disp.validation_nll[at] == pytest.approx(
        log_loss(y[60:], pipe.predict_proba(X[60:]), labels=clf.classes_), rel=1e-10)
    only_evidence = EvidenceCurveDisplay.from_estimator(clf, prior_precisions=[1.0, 2.0])
    assert only_evidence.validation_nll is None and only_evidence.ax_nll_ is None


def test_refusals():
    X, y = _regression()
    reg = LaplaceRegressor(_frozen_linear(3), hessian_structure="full", hyperparameter_tuning=None,
                           normalize_y=False).fit(X, y)
    with pytest.raises(ValueError, match="X_val and y_val"):
        EvidenceCurveDisplay.from_estimator(reg, X)
    with pytest.raises(ValueError, match="prior_precisions"):
        EvidenceCurveDisplay.from_estimator(reg, prior_precisions=[1.0, -1.0])
    layerwise = LaplaceRegressor(_frozen_linear(3), hessian_structure="full",
                                 prior_precision=[1.0, 2.0], hyperparameter_tuning=None,
                                 normalize_y=False).fit(X, y)
    with pytest.raises(ValueError, match="single prior precision"):
        EvidenceCurveDisplay.from_estimator(layerwise)
    refined = LaplaceRegressor(_frozen_linear(3), hessian_structure="full", refine="laplace",
                               hyperparameter_tuning=None, normalize_y=False).fit(X, y)
    with pytest.raises(ValueError, match="refine"):
        EvidenceCurveDisplay.from_estimator(refined, X, y)
