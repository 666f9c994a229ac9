"""``LaplaceRegressor.predict(X, return_cov=True)`` and ``sample_y``: the joint predictive
over rows, with ``GaussianProcessRegressor``'s signatures and shapes."""

import numpy as np
import pytest
import torch
from skorch import NeuralNetRegressor
from sklearn.frozen import FrozenEstimator
from sklearn.gaussian_process import GaussianProcessRegressor
from torch import nn

from sklaplace import LaplaceRegressor
from sklaplace.distributions._joint import joint_moments


def _data(n=40, d=3, k=1, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    Y = X @ rng.normal(size=(d, k)) + 0.3 + 0.4 * rng.normal(size=(n, k))
    return X, (Y[:, 0] if k == 1 else Y)


def _frozen_linear(d, theta):
    module = nn.Sequential(nn.Linear(d, 1)).double()
    with torch.no_grad():
        module[0].weight.copy_(torch.as_tensor(theta[:d]).reshape(1, d))
        module[0].bias.copy_(torch.as_tensor(theta[d:]))
    return FrozenEstimator(NeuralNetRegressor(module, criterion=nn.MSELoss).initialize())


@pytest.mark.parametrize("structure", ["full", "diag", "kron"])
def test_return_cov_is_j_sigma_jt_plus_noise_for_a_linear_net(structure):
    X, y = _data()
    d = X.shape[1]
    theta = np.linalg.lstsq(np.hstack([X, np.ones((len(X), 1))]), y, rcond=None)[0]
    reg = LaplaceRegressor(_frozen_linear(d, theta), subset_of_weights="all",
                           hessian_structure=structure, prior_precision=1.5, sigma_noise=0.4,
                           hyperparameter_tuning=None, normalize_y=False).fit(X, y)
    X_test = _data(n=6, seed=1)[0]
    J = np.hstack([X_test, np.ones((6, 1))])  # the Jacobian of a linear net
    Sigma = reg.posterior_.covariance_matrix()
    mean, cov = reg.predict(X_test, return_cov=True)
    np.testing.assert_allclose(mean, J @ theta, rtol=1e-10)
    np.testing.assert_allclose(cov, J @ Sigma @ J.T + 0.4**2 * np.eye(6), rtol=1e-9, atol=1e-14)
    _, std = reg.predict(X_test, return_std=True)
    np.testing.assert_allclose(np.diag(cov), std**2, rtol=1e-10)


@pytest.fixture(scope="module")
def fitted():
    X, Y = _data(n=60, k=2)
    common = dict(hidden_layer_sizes=(6,), max_epochs=20, random_state=0)
    return X, {
        "single": LaplaceRegressor(**common).fit(X, Y[:, 0] * 100 + 5),
        "multi": LaplaceRegressor(**common).fit(X, Y * [1.0, 30.0]),
        "nn": LaplaceRegressor(pred_type="nn", n_samples=50, **common).fit(X, Y[:, 0]),
    }


@pytest.mark.parametrize("case", ["single", "multi", "nn"])
def test_shapes_and_diagonal_as_gaussian_process_regressor(fitted, case):
    X, regs = fitted
    reg, X_test = regs[case], X[:5]
    y = reg.predict(X)  # the training targets' shape is that of the predictions
    gpr = GaussianProcessRegressor().fit(X, y)
    mean, cov = reg.predict(X_test, return_cov=True)
    gpr_mean, gpr_cov = gpr.predict(X_test, return_cov=True)
    assert mean.shape == gpr_mean.shape and cov.shape == gpr_cov.shape
    for n_samples in (1, 3):
        assert reg.sample_y(X_test, n_samples).shape == gpr.sample_y(X_test, n_samples).shape
    assert reg.sample_y(X_test).shape == gpr.sample_y(X_test).shape
    mean_std, std = reg.predict(X_test, return_std=True)
    np.testing.assert_allclose(mean, mean_std, rtol=1e-10)
    diagonal = np.diagonal(cov, axis1=0, axis2=1).T  # (n,) or (n, k)
    np.testing.assert_allclose(diagonal, std**2, rtol=1e-8)
    with pytest.raises(ValueError, match="return_std or return_cov"):
        reg.predict(X_test, return_std=True, return_cov=True)
    assert reg.sample_functions(X_test, n_samples=2).shape == (2, 5, 1 if y.ndim == 1 else 2)


@pytest.mark.parametrize("case", ["single", "multi"])
def test_sample_y_moments(fitted, case):
    X, regs = fitted
    reg, X_test = regs[case], X[:4]
    mean, cov = reg.predict(X_test, return_cov=True)
    draws = reg.sample_y(X_test, n_samples=20_000, random_state=0)
    if draws.ndim == 2:  # (n, S) → (n, 1, S)
        draws, mean, cov = draws[:, None], mean[:, None], cov[..., None]
    S = draws.shape[-1]
    for c in range(draws.shape[1]):
        sd = np.sqrt(np.diag(cov[:, :, c]))
        assert np.all(np.abs(draws[:, c].mean(-1) - mean[:, c]) < 5 * sd / np.sqrt(S))
        np.testing.assert_allclose(np.cov(draws[:, c]), cov[:, :, c],
                                   atol=5 * np.sqrt(2 / S) * sd.max() ** 2)
    np.testing.assert_array_equal(reg.sample_y(X_test, 2), reg.sample_y(X_test, 2))
    if case == "multi":  # the draws keep the covariances between outputs
        _, joint = joint_moments(reg, X_test)
        flat = joint.reshape(8, 8)
        sd = np.sqrt(np.diag(flat))
        np.testing.assert_allclose(np.cov(draws.reshape(8, S)), flat,
                                   atol=5 * np.sqrt(2 / S) * sd.max() ** 2)
