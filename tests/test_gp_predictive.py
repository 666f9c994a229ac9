"""pred_type="gp": the functional Laplace (GLM paper §3.5) against exact references."""

import numpy as np
import pytest
import torch
from skorch import NeuralNet
from sklearn.frozen import FrozenEstimator
from torch import nn

from sklaplace import LaplaceClassifier, LaplaceRegressor


def _frozen(n_in, n_out, hidden=None, criterion=nn.CrossEntropyLoss, seed=0):
    torch.manual_seed(seed)
    layers = [nn.Linear(n_in, n_out)] if hidden is None else [
        nn.Linear(n_in, hidden), nn.Tanh(), nn.Linear(hidden, n_out)]
    module = nn.Sequential(*layers).double()
    return FrozenEstimator(NeuralNet(module, criterion=criterion).initialize())


def _data(n=50, d=4, k=3, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.randn(n, d)
    return X, np.argmax(X[:, :k] + 0.5 * rng.randn(n, k), axis=1), X[:, 0] + 0.3 * rng.randn(n)


COMMON = dict(hyperparameter_tuning=None, subset_of_weights="all", prior_precision=2.0,
              random_state=0)


@pytest.mark.parametrize("hidden, n", [(None, 50), (16, 8)])  # P ≤ N·C, and the kernel path
def test_gp_with_all_rows_equals_the_weight_space_glm_classifier(hidden, n):
    X, y, _ = _data(n=n)
    net = _frozen(4, 3, hidden)
    glm = LaplaceClassifier(net, hessian_structure="full", **COMMON).fit(X, y)
    gp = LaplaceClassifier(net, pred_type="gp", hessian_structure="diag", **COMMON).fit(X, y)
    X_test = np.random.RandomState(1).randn(7, 4)
    a, b = glm.predict_dist(X_test), gp.predict_dist(X_test)
    np.testing.assert_allclose(b.logit_cov, a.logit_cov, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(gp.predict_proba(X_test), glm.predict_proba(X_test), rtol=1e-8)


def test_gp_with_all_rows_equals_the_weight_space_glm_regressor():
    X, _, y = _data()
    net = _frozen(4, 1, criterion=nn.MSELoss)
    params = dict(COMMON, sigma_noise=0.4, normalize_y=False)
    glm = LaplaceRegressor(net, hessian_structure="full", **params).fit(X, y)
    gp = LaplaceRegressor(net, pred_type="gp", hessian_structure="kron", **params).fit(X, y)
    X_test = np.random.RandomState(1).randn(7, 4)
    np.testing.assert_allclose(gp.predict(X_test, return_std=True),
                               glm.predict(X_test, return_std=True), rtol=1e-8)


def test_gp_subset_rows_stand_for_all_rows():
    X, y, _ = _data(n=60)
    net = _frozen(4, 3, 8)
    gp = LaplaceClassifier(net, pred_type="gp", gp_subset_size=15, **COMMON).fit(X, y)
    rows = np.sort(np.random.RandomState(gp.laplace_.prediction_seed).choice(60, 15, replace=False))
    # the same GP: the full GLM posterior of those rows, each weighing N/M = 4
    ref = LaplaceClassifier(net, hessian_structure="full", **COMMON).fit(
        X[rows], y[rows], sample_weight=np.full(15, 4.0))
    X_test = np.random.RandomState(2).randn(5, 4)
    np.testing.assert_allclose(gp.predict_dist(X_test).logit_cov,
                               ref.predict_dist(X_test).logit_cov, rtol=1e-8, atol=1e-12)
    # fewer rows, less information: the predictive is wider than with all rows
    full = LaplaceClassifier(net, pred_type="gp", **COMMON).fit(X, y)
    assert (np.trace(gp.predict_dist(X_test).logit_cov, axis1=1, axis2=2)
            > np.trace(full.predict_dist(X_test).logit_cov, axis1=1, axis2=2)).all()


@pytest.mark.parametrize("size", [0, -1, 2.5, True])
def test_bad_gp_subset_size(size):
    X, y, _ = _data()
    with pytest.raises(ValueError, match="gp_subset_size"):
        LaplaceClassifier(pred_type="gp", gp_subset_size=size, max_epochs=2).fit(X, y)


def test_cv_tuning_with_gp_scores_the_gp_predictive(monkeypatch):
    """hyperparameter_tuning='cv' with pred_type='gp': δ is the one-SE choice over the grid
    of the held-out NLL of the GP predictive (M of the fit rows), not of the weight-space
    structure's: equal to fitting the GP at each δ by hand. (Scored the structure's before.)"""
    import warnings

    from sklaplace.estimators import _base
    from sklaplace._laplace.holdout import LOG10_PRIOR_GRID, one_standard_error_choice

    X, y, _ = _data(n=80)
    splits, split = [], _base.validation_split
    monkeypatch.setattr(_base, "validation_split",
                        lambda *args, **kwargs: splits.append(split(*args, **kwargs)) or splits[-1])
    params = dict(subset_of_weights="all", hessian_structure="diag", pred_type="gp",
                  gp_subset_size=6, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # cv with a frozen net: in-sample rows
        clf = LaplaceClassifier(_frozen(4, 3), hyperparameter_tuning="cv", **params).fit(X, y)
    fit, held_out = splits[0]
    deltas = 10.0 ** LOG10_PRIOR_GRID
    losses = []
    for delta in deltas:
        one = LaplaceClassifier(_frozen(4, 3), prior_precision=delta,
                                hyperparameter_tuning=None, **params).fit(X[fit], y[fit])
        proba = one.predict_proba(X[held_out])
        losses.append(-np.log(proba[np.arange(len(held_out)), y[held_out]]))
    chosen = one_standard_error_choice(np.array(losses))
    assert clf.prior_precision_ == pytest.approx(deltas[chosen], rel=1e-12)
    assert clf.validation_nll_ == pytest.approx(np.mean(losses[chosen]), rel=1e-6)
