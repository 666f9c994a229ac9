"""A net without hidden layer is Bayesian linear regression: the LA is exact."""

import numpy as np
import pytest
import torch
from skorch import NeuralNetRegressor
from sklearn.frozen import FrozenEstimator
from torch import nn

from sklaplace import LaplaceRegressor


class Linear64(nn.Module):
    def __init__(self, n_features=3, n_outputs=1):
        super().__init__()
        self.linear = nn.Linear(n_features, n_outputs, dtype=torch.float64)

    def forward(self, X):
        return self.linear(X)


def _data(n=40, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = X @ np.array([1.5, -2.0, 0.5])[:d] + 0.3 + 0.4 * rng.normal(size=n)
    return X, y


def _closed_form(X, y, delta, sigma):
    """Bayesian linear regression with prior N(0, δ⁻¹I) on weights and bias."""
    Xb = np.hstack([X, np.ones((len(X), 1))])
    precision = Xb.T @ Xb / sigma**2 + delta * np.eye(Xb.shape[1])
    cov = np.linalg.inv(precision)
    theta = cov @ Xb.T @ y / sigma**2
    K = sigma**2 * np.eye(len(X)) + Xb @ Xb.T / delta
    _, logdet = np.linalg.slogdet(K)
    log_evidence = -0.5 * (y @ np.linalg.solve(K, y) + logdet + len(X) * np.log(2 * np.pi))
    return theta, cov, log_evidence


def _frozen_net(theta, d):
    net = NeuralNetRegressor(Linear64, module__n_features=d, criterion=nn.MSELoss)
    net.initialize()
    with torch.no_grad():
        net.module_.linear.weight.copy_(torch.as_tensor(theta[:d]).reshape(1, d))
        net.module_.linear.bias.copy_(torch.as_tensor(theta[d:]))
    return FrozenEstimator(net)


@pytest.mark.parametrize("structure", ["full", "lowrank"])
def test_evidence_and_predictive_equal_closed_form(structure):
    X, y = _data()
    delta, sigma = 2.0, 0.5
    theta, cov, log_ev = _closed_form(X, y, delta, sigma)
    reg = LaplaceRegressor(
        _frozen_net(theta, X.shape[1]), subset_of_weights="all", hessian_structure=structure,
        lowrank_rank=4, prior_precision=delta, sigma_noise=sigma, hyperparameter_tuning=None,
        normalize_y=False,
    ).fit(X, y)
    X_test = np.random.default_rng(1).normal(size=(5, 3))
    Xb = np.hstack([X_test, np.ones((5, 1))])
    mean, std = reg.predict(X_test, return_std=True)
    np.testing.assert_allclose(reg.log_evidence_, log_ev, rtol=1e-6)
    np.testing.assert_allclose(mean, Xb @ theta, rtol=1e-6)
    np.testing.assert_allclose(std, np.sqrt(np.einsum("ni,ij,nj->n", Xb, cov, Xb) + sigma**2),
                               rtol=1e-6)
    assert reg.log_evidence() == pytest.approx(log_ev, rel=1e-6)


def test_last_layer_full_equals_closed_form():
    X, y = _data()
    delta, sigma = 0.7, 0.3
    theta, cov, log_ev = _closed_form(X, y, delta, sigma)
    reg = LaplaceRegressor(
        _frozen_net(theta, 3), subset_of_weights="last_layer", hessian_structure="full",
        prior_precision=delta, sigma_noise=sigma, hyperparameter_tuning=None,
        normalize_y=False,
    ).fit(X, y)
    np.testing.assert_allclose(reg.log_evidence_, log_ev, rtol=1e-6)


def _laplace_log_evidence(X, y, theta, delta, sigma):
    """Laplace evidence at fixed weights θ (not re-optimized), by hand."""
    Xb = np.hstack([X, np.ones((len(X), 1))])
    r = y - Xb @ theta
    n, P = Xb.shape
    loglik = -0.5 * n * np.log(2 * np.pi * sigma**2) - r @ r / (2 * sigma**2)
    prior = -0.5 * delta * theta @ theta + 0.5 * P * np.log(delta)
    _, logdet = np.linalg.slogdet(Xb.T @ Xb / sigma**2 + delta * np.eye(P))
    return loglik + prior - 0.5 * logdet


def test_evidence_tuning_matches_grid_argmax():
    X, y = _data(n=60)
    theta, _, _ = _closed_form(X, y, 1.0, 0.5)
    reg = LaplaceRegressor(
        _frozen_net(theta, 3), subset_of_weights="all", hessian_structure="full",
        normalize_y=False,
    ).fit(X, y)
    deltas = np.logspace(-3, 2, 201)
    sigmas = np.linspace(0.2, 0.8, 201)
    grid = np.array([[_laplace_log_evidence(X, y, theta, d, s) for s in sigmas] for d in deltas])
    i, j = np.unravel_index(np.argmax(grid), grid.shape)
    assert reg.log_evidence_ >= grid.max() - 1e-9
    assert reg.prior_precision_ == pytest.approx(deltas[i], rel=0.06)
    assert reg.sigma_noise_ == pytest.approx(sigmas[j], abs=0.004)
    assert reg.log_evidence_ == pytest.approx(
        _laplace_log_evidence(X, y, theta, reg.prior_precision_, reg.sigma_noise_), rel=1e-9
    )
    # log_evidence() evaluates the same function.
    assert reg.log_evidence(prior_precision=deltas[i], sigma_noise=sigmas[j]) == pytest.approx(
        grid[i, j], rel=1e-9
    )
