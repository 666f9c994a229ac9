"""``online_frequency="converged"``: the evidence updates where L-BFGS has converged.

MacKay's alternation (train to the MAP at δ, σ; maximise the Laplace evidence there; go
on while it rises) has as its fixed point a stationary point of the exact evidence: for a
linear model the Laplace evidence at the MAP is exact, and its gradient in (δ, σ) at the
MAP of (δ, σ) is the exact evidence's (the log joint's gradient in θ vanishes there).
"""

import warnings

import numpy as np
import pytest
import torch
from scipy.optimize import minimize
from sklearn.exceptions import ConvergenceWarning

from sklaplace import LaplaceClassifier, LaplaceRegressor


@pytest.fixture
def float64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def _data(n=80, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return X, X @ np.array([1.5, -2.0, 0.5]) + 0.3 + 0.4 * rng.normal(size=n)


def _log_evidence(X, y, log_delta, log_sigma):
    """Bayesian linear regression, prior N(0, δ⁻¹I) on weights and bias (float64)."""
    delta, sigma = np.exp(log_delta), np.exp(log_sigma)
    Xb = np.hstack([X, np.ones((len(X), 1))])
    K = sigma**2 * np.eye(len(X)) + Xb @ Xb.T / delta
    _, logdet = np.linalg.slogdet(K)
    return -0.5 * (y @ np.linalg.solve(K, y) + logdet + len(X) * np.log(2 * np.pi))


def test_the_alternation_reaches_the_exact_evidence_maximum(float64):
    X, y = _data()
    best = minimize(lambda v: -_log_evidence(X, y, *v), [0.0, 0.0], method="Nelder-Mead",
                    options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 4000})
    delta, sigma = np.exp(best.x)
    reg = LaplaceRegressor(hidden_layer_sizes=(), solver="lbfgs", online_frequency="converged",
                           hyperparameter_tuning="online", normalize_y=False, tol=1e-10,
                           max_epochs=500, random_state=0).fit(X, y)
    history = reg.evidence_history_
    assert len(history) >= 2  # it went on after the first update: the evidence rose
    assert reg.n_iter_ < 500  # and stopped where an update no longer raised it
    assert reg.prior_precision_ == pytest.approx(delta, rel=1e-4)
    assert reg.sigma_noise_ == pytest.approx(sigma, rel=1e-5)
    assert reg.log_evidence_ == pytest.approx(-best.fun, abs=1e-6)


def test_training_goes_on_only_while_an_update_raises_the_evidence(float64):
    X, y = _data()
    reg = LaplaceRegressor(hidden_layer_sizes=(), solver="lbfgs", online_frequency="converged",
                           hyperparameter_tuning="online", normalize_y=False,
                           random_state=0).fit(X, y)
    values = [h["log_evidence"] for h in reg.evidence_history_]
    n_rows = len(X)
    # every update that training went on after raised the best evidence by over tol·N
    assert all(b > max(values[:i + 1]) + 1e-4 * n_rows for i, b in enumerate(values[1:-1]))
    assert values[-1] <= max(values[:-1]) + 1e-4 * n_rows  # the last one did not
    assert [h["epoch"] for h in reg.evidence_history_] == sorted(
        h["epoch"] for h in reg.evidence_history_)


def test_a_training_that_has_not_converged_is_tuned_once_at_its_end():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 3))
    y = np.sin(2 * X[:, 0]) + X[:, 1] ** 2
    with pytest.warns(ConvergenceWarning, match="without converging"):
        reg = LaplaceRegressor(hidden_layer_sizes=(16,), solver="lbfgs", max_epochs=15,
                               online_frequency="converged", hyperparameter_tuning="online",
                               random_state=0).fit(X, y)
    assert [h["epoch"] for h in reg.evidence_history_] == [15]
    assert reg.hyperparameter_tuning_ == "online"


@pytest.mark.parametrize("cls", [LaplaceRegressor, LaplaceClassifier])
def test_both_estimators_update_at_convergence_under_lbfgs(cls):
    X, y = _data(n=60)
    y = y if cls is LaplaceRegressor else (y > np.median(y)).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = cls(hidden_layer_sizes=(8,), solver="lbfgs", online_frequency="converged",
                  hyperparameter_tuning="online", max_epochs=40, random_state=0).fit(X, y)
    assert est.hyperparameter_tuning_ == "online"
    assert est.evidence_history_  # at least the update at the end of training
    assert est.evidence_history_[-1]["epoch"] <= est.n_iter_
    callback = next(cb for _, cb in est.net_.callbacks_ if hasattr(cb, "history_"))
    assert not hasattr(callback, "_data") and callback.curvature_ is None  # nothing kept


def test_dask_input_refuses_the_converged_updates():
    pytest.importorskip("dask")
    import dask.array as da

    X, y = _data(n=60)
    with pytest.raises(ValueError, match="online_frequency='converged'"):
        LaplaceRegressor(hidden_layer_sizes=(4,), online_frequency="converged",
                         max_epochs=5).fit(da.from_array(X, chunks=30), da.from_array(y, chunks=30))


def test_the_converged_updates_compute_the_curvature_anew_under_either_schedule():
    X, y = _data(n=60)
    fits = [LaplaceRegressor(hidden_layer_sizes=(), solver="lbfgs", online_frequency="converged",
                             online_curvature=schedule, hyperparameter_tuning="online",
                             random_state=0).fit(X, y) for schedule in ("every", "doubling")]
    histories = [[(h["epoch"], h["log_evidence"]) for h in f.evidence_history_] for f in fits]
    assert histories[0] == histories[1] and len(histories[0]) >= 2
    np.testing.assert_array_equal(fits[0].prior_precision_, fits[1].prior_precision_)
