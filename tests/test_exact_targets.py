"""Targets the net can fit exactly: a constant (or near-constant) y.

Each ended in "MAP training diverged … scale the features … raise prior_precision":

- σ's floor of tuning is relative to the targets' spread, 0 for a constant target: the
  evidence drove σ to ~1e-12 and the linear candidate's float32 L-BFGS to a non-finite
  loss; a constant target's scale is that of ``TargetScale``'s (1 for a zero spread);
- the heteroscedastic start took g₀ = −log of the mean's residuals' mean square without that
  floor (e^(g₀) up to 1/float32's tiny).
"""

import numpy as np
import pytest
import torch

from sklaplace import LaplaceRegressor
from sklaplace._laplace import likelihoods
from sklaplace._laplace.hyperparameters import SIGMA_FLOOR, sigma_floor
from sklaplace.estimators import _warmup as warmup
from sklaplace.estimators._training import online_callbacks, settings_of
from sklaplace.nets import MLP

X = np.random.default_rng(0).normal(size=(200, 5))


@pytest.mark.parametrize("jitter", [0.0, 1e-9])
@pytest.mark.parametrize("noise", ["homoscedastic", "heteroscedastic"])
def test_a_constant_target_fits_with_the_defaults(noise, jitter):
    y = 3.0 + jitter * np.random.default_rng(1).normal(size=len(X))
    est = LaplaceRegressor(noise=noise, random_state=0).fit(X, y)
    mean, std = est.predict(X, return_std=True)
    np.testing.assert_allclose(mean, 3.0, atol=1e-2)
    assert np.all(np.isfinite(std)) and np.all(std > 0) and np.median(std) < 1e-2
    if noise == "homoscedastic":  # σ at its floor, 1e-3 of the unit scale of y
        assert np.all(std < 1e-2)


def test_the_sigma_floor_of_a_constant_target_is_that_of_its_unit_scale():
    np.testing.assert_allclose(sigma_floor([0.0, 2.0]), [SIGMA_FLOOR, 2 * SIGMA_FLOOR])
    s = settings_of(LaplaceRegressor())
    (callback,) = online_callbacks(s, likelihoods.get("gaussian"), [5, 1], True,
                                   np.zeros((200, 1)), 1)
    assert callback.sigma_floor == SIGMA_FLOOR


def test_evidence_tuning_of_a_constant_target_keeps_sigma_at_its_floor():
    """σ bounded by 1e-3 of the MAP's residuals (~1e-8) once, not of y's unit scale."""
    est = LaplaceRegressor(hidden_layer_sizes=(), solver="lbfgs",
                           hyperparameter_tuning="evidence", random_state=0)
    est.fit(X, np.full(len(X), 3.0))
    assert est.sigma_noise_ >= SIGMA_FLOOR * (1 - 1e-6)


def test_the_heteroscedastic_start_of_zero_residuals_is_at_the_sigma_floor():
    exact = MLP(5, 1, ()).double()  # the constant 2: no residual at all
    with torch.no_grad():
        exact.layers[-1].weight.zero_()
        exact.layers[-1].bias.fill_(2.0)
    module, g0 = warmup.natural_start(exact, X, np.full((len(X), 1), 2.0))
    np.testing.assert_allclose(g0, -2 * np.log(SIGMA_FLOOR), rtol=1e-12)
    with torch.no_grad():
        f = module(torch.as_tensor(X)).numpy()
    np.testing.assert_allclose(f[:, 0] * np.exp(-f[:, 1]), 2.0, rtol=1e-12)
