"""Estimator-level maths: logistic regression by hand, Bernoulli vs two logits,
NN sampling vs GLM, and evidence tuning at its optimum."""

import warnings

import numpy as np
import pytest
import torch
from scipy.special import expit
from skorch import NeuralNet
from sklearn.datasets import load_iris, make_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.frozen import FrozenEstimator
from torch import nn

from sklaplace import LaplaceClassifier, LaplaceRegressor


class Linear64(nn.Module):
    def __init__(self, n_features=2, n_outputs=1):
        super().__init__()
        self.linear = nn.Linear(n_features, n_outputs, dtype=torch.float64)

    def forward(self, X):
        return self.linear(X)


def _frozen(W, b, criterion):
    net = NeuralNet(Linear64, module__n_features=W.shape[1], module__n_outputs=W.shape[0],
                    criterion=criterion)
    net.initialize()
    with torch.no_grad():
        net.module_.linear.weight.copy_(torch.as_tensor(W))
        net.module_.linear.bias.copy_(torch.as_tensor(b))
    return FrozenEstimator(net)


def _logistic_map(X, y, delta):
    """Newton's method for the MAP of logistic regression, prior N(0, δ⁻¹I) on w and b."""
    Xb = np.hstack([X, np.ones((len(X), 1))])
    theta = np.zeros(Xb.shape[1])
    for _ in range(100):
        p = expit(Xb @ theta)
        grad = Xb.T @ (p - y) + delta * theta
        H = Xb.T @ (Xb * (p * (1 - p))[:, None]) + delta * np.eye(len(theta))
        theta -= np.linalg.solve(H, grad)
    return theta, H


@pytest.fixture(scope="module")
def logistic_problem():
    X, y = make_classification(n_samples=60, n_features=2, n_redundant=0, n_informative=2,
                               class_sep=0.7, random_state=3)
    return X, y


def test_bernoulli_la_equals_hand_computed_logistic_regression(logistic_problem):
    X, y = logistic_problem
    delta = 0.5
    theta, H = _logistic_map(X, y, delta)
    clf = LaplaceClassifier(_frozen(theta[None, :2], theta[2:], nn.BCEWithLogitsLoss),
                            prior_precision=delta, hyperparameter_tuning=None,
                            subset_of_weights="all", hessian_structure="full").fit(X, y)
    Xb = np.hstack([X, np.ones((len(X), 1))])
    p = expit(Xb @ theta)
    loglik = np.sum(y * np.log(p) + (1 - y) * np.log(1 - p))
    log_ev = (loglik - 0.5 * delta * theta @ theta + 0.5 * 3 * np.log(delta)
              - 0.5 * np.linalg.slogdet(H)[1])
    assert clf.log_evidence_ == pytest.approx(log_ev, rel=1e-8)
    X_test = np.array([[0.3, -1.0], [2.0, 2.0], [-3.0, 1.0]])
    Xt = np.hstack([X_test, np.ones((3, 1))])
    var = np.einsum("ni,ij,nj->n", Xt, np.linalg.inv(H), Xt)
    p_probit = expit(Xt @ theta / np.sqrt(1 + np.pi * var / 8))
    np.testing.assert_allclose(clf.predict_proba(X_test)[:, 1], p_probit, rtol=1e-8)


def test_bernoulli_and_two_logit_models_agree(logistic_problem):
    """Two logits with prior δ have the logit difference of one logit with prior δ/2:
    same evidence, same Gaussian over the difference, same MC predictive."""
    X, y = logistic_problem
    delta = 0.8
    theta, _ = _logistic_map(X, y, delta / 2)
    d, b = theta[:2], theta[2]
    common = dict(hyperparameter_tuning=None, subset_of_weights="all",
                  hessian_structure="full", link_approx="mc", n_samples=20000)
    bern = LaplaceClassifier(_frozen(d[None], [b], nn.BCEWithLogitsLoss),
                             prior_precision=delta / 2, **common).fit(X, y)
    cat = LaplaceClassifier(_frozen(np.vstack([-d / 2, d / 2]), [-b / 2, b / 2],
                                    nn.CrossEntropyLoss), prior_precision=delta, **common).fit(X, y)
    assert cat.log_evidence_ == pytest.approx(bern.log_evidence_, rel=1e-9)
    X_test = np.array([[0.3, -1.0], [2.0, 2.0], [-3.0, 1.0]])
    db, dc = bern.predict_dist(X_test), cat.predict_dist(X_test)

    def difference(dist):
        mean = dist.logit_mean[:, 1] - dist.logit_mean[:, 0]
        c = dist.logit_cov
        return mean, c[:, 0, 0] + c[:, 1, 1] - 2 * c[:, 0, 1]

    for a, b_ in zip(difference(db), difference(dc)):
        np.testing.assert_allclose(a, b_, rtol=1e-8)
    np.testing.assert_allclose(db.proba(), dc.proba(), atol=0.01)


def test_nn_sampling_converges_to_glm_for_a_linear_model():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 2))
    y = X @ [1.0, -1.0] + 0.5 * rng.normal(size=50)
    net = NeuralNet(Linear64, module__n_features=2, criterion=nn.MSELoss)
    net.initialize()
    common = dict(subset_of_weights="all", hessian_structure="full", sigma_noise=0.5,
                  prior_precision=1.0, hyperparameter_tuning=None)
    glm = LaplaceRegressor(FrozenEstimator(net), **common).fit(X, y)
    X_test = rng.normal(size=(4, 2)) * 3
    m_glm, s_glm = glm.predict(X_test, return_std=True)
    errors = []
    for n in (100, 10000):
        nn_ = LaplaceRegressor(FrozenEstimator(net), pred_type="nn", n_samples=n, **common)
        m, s = nn_.fit(X, y).predict(X_test, return_std=True)
        errors.append(np.abs(s / s_glm - 1).max() + np.abs(m - m_glm).max() / s_glm.min())
    assert errors[1] < 0.05 and errors[1] < errors[0]


@pytest.mark.parametrize("structure", ["full", "kron", "diag"])
def test_scalar_tuning_reaches_the_grid_maximum_classification(structure):
    X, y = load_iris(return_X_y=True)
    clf = LaplaceClassifier(hidden_layer_sizes=(6,), max_epochs=60, random_state=0,
                            subset_of_weights="all", hessian_structure=structure,
                            hyperparameter_tuning="evidence").fit(X, y)
    grid = np.logspace(-4, 4, 801)
    values = np.array([clf.log_evidence(prior_precision=d) for d in grid])
    assert clf.log_evidence_ >= values.max() - 1e-8
    assert clf.prior_precision_ == pytest.approx(grid[values.argmax()], rel=0.03)


@pytest.mark.parametrize("estimator", ["classifier", "regressor"])
def test_layerwise_tuning_is_a_local_maximum(estimator):
    if estimator == "classifier":
        X, y = load_iris(return_X_y=True)
        est = LaplaceClassifier(hidden_layer_sizes=(6,), max_epochs=60, random_state=0,
                                prior_structure="layerwise", hessian_structure="kron",
                                subset_of_weights="all")
    else:
        rng = np.random.default_rng(0)
        X = rng.normal(size=(80, 3))
        y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=80)
        est = LaplaceRegressor(hidden_layer_sizes=(6,), max_epochs=60, random_state=0,
                               prior_structure="layerwise", subset_of_weights="all",
                               hessian_structure="full")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
    best = est.log_evidence_
    tuned = est.prior_precision_
    assert tuned.shape == (4,)
    kwargs = {} if estimator == "classifier" else {"sigma_noise": est.sigma_noise_}
    for g in range(4):
        for factor in (0.9, 1.1):
            prior = tuned.copy()
            prior[g] = np.clip(prior[g] * factor, 1e-4, 1e4)
            assert est.log_evidence(prior_precision=prior, **kwargs) <= best + 1e-8
    if estimator == "regressor":
        for factor in (0.95, 1.05):
            assert est.log_evidence(sigma_noise=est.sigma_noise_ * factor) <= best + 1e-8


def test_tuning_warns_at_the_bound():
    X, y = load_iris(return_X_y=True)
    # θ* at zero (an untrained frozen linear model): the evidence grows with δ up to the bound.
    net = NeuralNet(Linear64, module__n_features=4, module__n_outputs=3,
                    criterion=nn.CrossEntropyLoss)
    net.initialize()
    with torch.no_grad():
        for p in net.module_.parameters():
            p.zero_()
    with pytest.warns(ConvergenceWarning, match="bound"):
        clf = LaplaceClassifier(FrozenEstimator(net), hyperparameter_tuning="evidence").fit(X, y)
    assert clf.prior_precision_ == pytest.approx(1e4)
