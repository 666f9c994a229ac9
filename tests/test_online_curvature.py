"""The curvature schedule of online tuning (``online_curvature``): which updates compute the
Laplace approximation anew, and what the updates between maximize."""

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from sklaplace import LaplaceClassifier, LaplaceRegressor
from sklaplace._laplace.online import OnlineEvidence


def _recomputing_epochs(schedule, frequency, burn_in, epochs=200):
    cb = OnlineEvidence("gaussian", frequency=frequency, burn_in=burn_in,
                        curvature_schedule=schedule).initialize()
    out = []
    for epoch in range(1, epochs + 1):
        if cb.due(epoch) and cb.recomputes(epoch):
            out.append(epoch)
            cb.curvature_ = (epoch, None)
    return out


@pytest.mark.parametrize("frequency, burn_in, expected", [
    (5, 0, [5, 10, 20, 40, 80, 160]),
    (5, 3, [8, 13, 23, 43, 83, 163]),
    (1, 0, [1, 2, 4, 8, 16, 32, 64, 128]),
])
def test_doubling_recomputes_at_doubling_epochs(frequency, burn_in, expected):
    assert _recomputing_epochs("doubling", frequency, burn_in) == expected


def test_every_recomputes_at_each_update():
    assert _recomputing_epochs("every", 5, 0) == list(range(5, 201, 5))


def test_defaults_are_immer_et_al():
    assert LaplaceClassifier().online_curvature == "every"
    assert LaplaceRegressor().online_curvature == "every"


def test_bad_value_names_the_parameter():
    X, y = np.random.default_rng(0).normal(size=(20, 2)), np.arange(20.0)
    with pytest.raises(ValueError, match="online_curvature"):
        LaplaceRegressor(online_curvature="sometimes").fit(X, y)


def _data(n=60, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return X, X @ np.array([1.0, -2.0, 0.5]) + 0.3 * rng.normal(size=n)


def test_linear_model_same_fit_under_both_schedules():
    # a linear model's GGN (X̃ᵀX̃) does not depend on its weights: nothing is stale
    X, y = _data()
    fits = {}
    for schedule in ("every", "doubling"):
        est = LaplaceRegressor(hidden_layer_sizes=(), hyperparameter_tuning="online",
                               solver="adam", max_epochs=40, tol=None, random_state=0,
                               online_curvature=schedule).fit(X, y)
        fits[schedule] = (est.predict(X, return_std=True), est.prior_precision_,
                          est.sigma_noise_)
    (m1, s1), d1, n1 = fits["every"]
    (m2, s2), d2, n2 = fits["doubling"]
    np.testing.assert_allclose(m2, m1, rtol=1e-10)
    np.testing.assert_allclose(s2, s1, rtol=1e-10)
    np.testing.assert_allclose(d2, d1, rtol=1e-10)
    np.testing.assert_allclose(n2, n1, rtol=1e-10)


def _tiny_net(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(),
                               torch.nn.Linear(8, 1)).double()


def test_stale_update_maximizes_the_evidence_over_the_last_spectrum():
    # the update between recomputations, against a direct float64 maximisation of the
    # scalar-prior evidence at the cached spectrum and the current residuals and weights
    X, y = _data()
    X, y = torch.as_tensor(X), torch.as_tensor(y)[:, None]
    cb = OnlineEvidence("gaussian", hessian_structure="full", prior_structure="scalar",
                        frequency=5, n_steps=None, curvature_schedule="doubling",
                        sigma_floor=1e-6).initialize()
    one = torch.tensor(1.0, dtype=torch.float64)
    cb.update(_tiny_net(0), X, y, one, one, epoch=5)  # computes the curvature at net 0
    lam = cb.curvature_[1].lam.numpy().copy()
    assert not cb.recomputes(7)
    moved = _tiny_net(1)  # other weights: the spectrum of net 0 is stale for it
    delta, sigma, value = cb.update(moved, X, y, one, one, epoch=7)
    assert cb.curvature_[0] == 5  # no new curvature
    with torch.no_grad():
        sse = float(((moved(X) - y) ** 2).sum())
    theta2 = float(sum((p.detach() ** 2).sum() for p in moved.parameters()))
    n, P = len(X), sum(p.numel() for p in moved.parameters())

    def neg_log_evidence(v):
        d, s = np.exp(v)
        return -(-sse / (2 * s**2) - n * np.log(s) - 0.5 * n * np.log(2 * np.pi)
                 - 0.5 * d * theta2 + 0.5 * P * np.log(d)
                 - 0.5 * np.sum(np.log(lam / s**2 + d)) - 0.5 * (P - lam.size) * np.log(d))

    ref = minimize(neg_log_evidence, np.zeros(2), method="Nelder-Mead",
                   options={"xatol": 1e-12, "fatol": 1e-14, "maxiter": 20000})
    d_ref, s_ref = np.exp(ref.x)
    np.testing.assert_allclose(float(delta), d_ref, rtol=1e-5)
    np.testing.assert_allclose(float(sigma), s_ref, rtol=1e-5)
    np.testing.assert_allclose(value, -ref.fun, rtol=1e-8)
    # MacKay's fixed point holds there: δ‖θ‖² = γ and σ² = SSE / (N − γ)
    gamma = np.sum((lam / s_ref**2) / (lam / s_ref**2 + d_ref))
    np.testing.assert_allclose(d_ref * theta2, gamma, rtol=1e-5)
    np.testing.assert_allclose(s_ref**2, sse / (n - gamma), rtol=1e-5)
