"""Targets the net can fit exactly: a constant (or near-constant) y, rows it interpolates,
nearly noise-free targets.

Each ended in "MAP training diverged … scale the features … raise prior_precision":

- σ's floor of tuning is relative to the targets' spread, 0 for a constant target: the
  evidence drove σ to ~1e-12 and the linear candidate's float32 L-BFGS to a non-finite
  loss; a constant target's scale is that of ``TargetScale``'s (1 for a zero spread);
- the heteroscedastic start took g₀ = −log of the mean's residuals' mean square without that
  floor (e^(g₀) up to 1/float32's tiny);
- the natural-parameter net's online updates tuned one δ for η₁'s weights (the mean's times
  e^g) and the rest, where post-hoc tuning takes one per head: the first update raised η₁'s
  training δ·e^(−2g₀) by up to e^(2g₀), and the loss with it.
"""

import numpy as np
import pytest
import torch

from sklaplace import LaplaceRegressor
from sklaplace._laplace import likelihoods
from sklaplace._laplace.hyperparameters import SIGMA_FLOOR, sigma_floor
from sklaplace._laplace.online import OnlineEvidence
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
    assert np.all(np.isfinite(std)) and np.all(std > 0)
    assert np.median(np.abs(mean - 3.0)) < 1e-4 and np.median(std) < 1e-2
    assert np.all(np.abs(mean - 3.0) < 3 * std + 1e-4)
    if noise == "homoscedastic":  # σ at its floor, 1e-3 of the unit scale of y
        assert np.all(np.abs(mean - 3.0) < 1e-2) and np.all(std < 1e-2)


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


def test_online_updates_of_the_natural_parameters_tune_delta_per_head():
    """η₁'s δ is searched within e^(−2ḡ) times the bounds, as post-hoc tuning does: at a
    precision of 1e6 its δ lies below the bounds' 1e-4 that one δ for all is held in."""
    rng = np.random.RandomState(0)
    y = X @ rng.normal(size=5) + 1e-3 * rng.normal(size=len(X))
    mean = MLP(5, 1, ()).double()
    with torch.no_grad():
        coef = np.linalg.lstsq(np.c_[X, np.ones(len(X))], y, rcond=None)[0]
        mean.layers[-1].weight.copy_(torch.as_tensor(coef[:5])[None])
        mean.layers[-1].bias.fill_(float(coef[5]))
    module, g0 = warmup.natural_start(mean, X, y[:, None])
    assert g0[0] > 10
    callback = OnlineEvidence("heteroscedastic", hessian_structure="full",
                              prior_structure="scalar", n_steps=None).initialize()
    delta, _, value = callback.update(module, torch.as_tensor(X), torch.as_tensor(y[:, None]),
                                      torch.tensor(1.0, dtype=torch.float64),
                                      torch.tensor(1.0, dtype=torch.float64))
    assert np.isfinite(value)
    delta = delta.numpy()
    assert delta.shape == (sum(p.numel() for p in module.parameters()),)
    eta1 = np.r_[np.arange(0, 5), 10]  # the output layer's η₁ row and bias
    assert np.all(delta[eta1] < 1e-4)
    assert np.all(delta[[5, 6, 7, 8, 9, 11]] >= 1e-4)


@pytest.mark.parametrize("weighted", [False, True])
def test_heteroscedastic_fits_rows_it_interpolates(weighted):
    """15 distinct rows × 30 features (scikit-learn's sample-weight check's shape), each
    twice or of weight 2: the one-σ fit worked, the heteroscedastic one diverged."""
    rng = np.random.RandomState(0)
    Xd, yd = rng.normal(size=(15, 30)), rng.normal(size=15)
    est = LaplaceRegressor(noise="heteroscedastic", random_state=0)
    if weighted:
        est.fit(Xd, yd, sample_weight=np.full(15, 2.0))
    else:
        est.fit(np.repeat(Xd, 2, axis=0), np.repeat(yd, 2))
    mean, std = est.predict(Xd, return_std=True)
    assert np.abs(mean - yd).max() < 0.01
    assert np.all(np.isfinite(std)) and np.all(std > 0)


def test_heteroscedastic_fits_a_nearly_noise_free_target():
    """Noise 3e-4 of std(y) diverged; σ(x) is now about σ's floor, 1e-3 of std(y)."""
    rng = np.random.RandomState(0)
    f = X @ rng.normal(size=5)
    y = f + 3e-4 * f.std() * rng.normal(size=len(X))
    est = LaplaceRegressor(noise="heteroscedastic", random_state=0).fit(X, y)
    mean, std = est.predict(X, return_std=True)
    assert np.sqrt(np.mean((mean - y) ** 2)) < SIGMA_FLOOR * y.std()
    assert 0.5 < np.median(std) / (SIGMA_FLOOR * y.std()) < 2
