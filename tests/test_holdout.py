"""hyperparameter_tuning="cv": held-out NLL search, and the centred extended probit."""

import warnings

import numpy as np
import pytest
import torch
from sklearn.frozen import FrozenEstimator

from sklaplace import LaplaceClassifier, LaplaceRegressor
from sklaplace.distributions import LogitGaussianPrediction, centered_logit_var, probit_proba
from sklaplace._laplace.holdout import (LOG10_PRIOR_GRID, MAX_HELD_OUT_COST,
                                        one_standard_error_choice, validation_split,
                                        variance_path)

FAST = dict(hidden_layer_sizes=(8,), max_epochs=20, random_state=0)


def _clf_data(n=90, k=3, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.randn(n, 4)
    y = np.argmax(X[:, :k] + 0.5 * rng.randn(n, k), axis=1)
    return X, y


def test_validation_split_is_stratified_and_disjoint():
    y = np.repeat([0, 1, 2], [50, 30, 20])
    fit, held = validation_split(len(y), 0.1, 0, labels=y)
    assert len(held) == 10 and len(fit) == 90
    assert not set(fit) & set(held)
    np.testing.assert_array_equal(np.bincount(y[held]), [5, 3, 2])
    with pytest.raises(ValueError, match="validation_fraction"):
        validation_split(2, 0.5, 0)


@pytest.mark.parametrize("structure", ["full", "lowrank", "diag", "kron"])
def test_variance_path_equals_the_posterior_at_each_prior(structure):
    X, y = _clf_data()
    est = LaplaceClassifier(hessian_structure=structure, subset_of_weights="all",
                            hyperparameter_tuning=None, lowrank_rank=5, **FAST).fit(X, y)
    post = est.laplace_.evidence.posterior
    _, J = est.laplace_.subset.jacobians(torch.as_tensor(X[:7], dtype=torch.float64))
    path = variance_path(post, J)
    for delta, s in [(0.3, 1.0), (5.0, 2.0)]:
        got = path(delta, s)
        post = post.with_prior(torch.tensor(delta, dtype=torch.float64), torch.tensor(s, dtype=torch.float64))
        np.testing.assert_allclose(got.cpu(), post.functional_variance(J).cpu(), rtol=1e-9,
                                   atol=1e-12)


def _trained_net(X, y, classifier=True):
    est = (LaplaceClassifier if classifier else LaplaceRegressor)(
        hyperparameter_tuning=None, **FAST).fit(X, y)
    return FrozenEstimator(est.net_)


def _cv_seed(est):
    rng = np.random.RandomState(est.random_state)
    rng.randint(0, 2**31 - 1, size=2)
    return int(rng.randint(0, 2**31 - 1))


def test_cv_picks_the_grid_prior_of_smallest_held_out_nll_and_refits():
    X, y = _clf_data(n=120)
    net = _trained_net(X, y)
    est = LaplaceClassifier(net, hyperparameter_tuning="cv", random_state=0).fit(X, y)
    # brute force: the LA on the same fit rows, every grid prior through the public predictor
    fit, held = validation_split(len(y), est.validation_fraction, _cv_seed(est), labels=y)
    part = LaplaceClassifier(net, hyperparameter_tuning=None).fit(X[fit], y[fit])
    losses, fitted = [], part.laplace_
    for log10 in LOG10_PRIOR_GRID:
        part.laplace_ = fitted.with_prior(10.0**log10)
        proba = part.predict_proba(X[held])
        losses.append(-np.log(proba[np.arange(len(held)), y[held]]))
    chosen = one_standard_error_choice(losses)
    best = 10.0 ** LOG10_PRIOR_GRID[chosen]
    assert est.prior_precision_ == pytest.approx(best)
    assert est.validation_nll_ == pytest.approx(np.mean(losses[chosen]), rel=1e-9)
    # the refit: the LA over all rows at the chosen prior
    full = LaplaceClassifier(net, hyperparameter_tuning=None, prior_precision=best).fit(X, y)
    np.testing.assert_allclose(est.predict_proba(X), full.predict_proba(X), rtol=1e-10)
    assert est.log_evidence_ == pytest.approx(full.log_evidence_, rel=1e-10)


def test_cv_refit_continues_the_held_out_pass_training_on_all_rows(monkeypatch):
    from sklaplace._laplace import nets

    calls = []
    train_map = nets.train_map

    def spy(net, X, y, **kwargs):
        init = kwargs.get("init_module")
        calls.append((len(X), None if init is None else
                      [p.detach().clone() for p in init.parameters()]))
        out = train_map(net, X, y, **kwargs)
        calls[-1] += ([p.detach().clone() for p in out.module_.parameters()],)
        return out

    monkeypatch.setattr(nets, "train_map", spy)
    X, y = _clf_data(n=100)
    est = LaplaceClassifier(hyperparameter_tuning="cv", **FAST).fit(X, y)
    (n_fit, init_fit, trained_fit), (n_all, init_all, trained_all) = calls
    assert n_fit == 100 - int(np.ceil(est.validation_fraction * 100)) and init_fit is None
    # one training: the refit starts where the held-out pass ended, on all rows
    assert n_all == 100
    for a, b in zip(init_all, trained_fit):
        torch.testing.assert_close(a, b)
    for a, b in zip(est.net_.module_.parameters(), trained_all):
        torch.testing.assert_close(a, b)


def test_cv_regressor_tunes_sigma_and_prior_on_held_out_rows():
    rng = np.random.RandomState(0)
    X = rng.randn(150, 3)
    y = np.sin(X[:, 0]) + 0.2 * rng.randn(150)
    net = _trained_net(X, y, classifier=False)
    est = LaplaceRegressor(net, hyperparameter_tuning="cv", normalize_y=False,
                           random_state=0).fit(X, y)
    fit, held = validation_split(len(y), est.validation_fraction, _cv_seed(est))
    # the net of a normalize_y fit is read in its standardized units: so is sigma_noise
    sigma_model = est.sigma_noise_ / est.laplace_.targets.std.mean()
    part = LaplaceRegressor(net, hyperparameter_tuning=None, normalize_y=False,
                            prior_precision=est.prior_precision_,
                            sigma_noise=sigma_model).fit(X[fit], y[fit])
    mean, std = part.predict(X[held], return_std=True)
    nll = np.mean(0.5 * np.log(2 * np.pi * std**2) + 0.5 * ((y[held] - mean) / std) ** 2)
    # validation_nll_ is in model (standardized) units, nll in the units of y
    assert nll == pytest.approx(est.validation_nll_ + np.log(est.laplace_.targets.std.mean()), rel=1e-6)
    # At a fixed ρ = δ/s(σ) the predictive variance scales as σ², so σ is optimal on the
    # held-out rows exactly when the standardized squared residuals average one.
    assert np.mean(((y[held] - mean) / std) ** 2) == pytest.approx(1.0, abs=1e-10)
    # the refit keeps (δ, σ) and fits the LA on all rows
    full = LaplaceRegressor(net, hyperparameter_tuning=None, normalize_y=False,
                            prior_precision=est.prior_precision_,
                            sigma_noise=sigma_model).fit(X, y)
    np.testing.assert_allclose(est.predict(X, return_std=True), full.predict(X, return_std=True),
                               rtol=1e-10)


def test_cv_with_vector_sigma_is_refused():
    rng = np.random.RandomState(0)
    X, Y = rng.randn(50, 3), rng.randn(50, 2)
    with pytest.raises(ValueError, match="scalar sigma_noise"):
        LaplaceRegressor(hyperparameter_tuning="cv", sigma_noise=[1.0, 2.0], **FAST).fit(X, Y)


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1, "0.1", True])
def test_bad_validation_fraction(fraction):
    X, y = _clf_data()
    with pytest.raises(ValueError, match="validation_fraction"):
        LaplaceClassifier(hyperparameter_tuning="cv", validation_fraction=fraction).fit(X, y)


def test_centered_probit_ignores_a_common_shift_of_the_logits():
    rng = np.random.RandomState(0)
    n, C = 20, 4
    A = rng.randn(n, C, C)
    cov = A @ A.transpose(0, 2, 1) * 0.5
    mean = rng.randn(n, C) * 2
    shifted = cov + 7.0 * np.ones((C, C))  # a common shift of all logits, variance 7
    base = LogitGaussianPrediction(mean, cov).proba()
    np.testing.assert_allclose(LogitGaussianPrediction(mean, shifted).proba(), base, rtol=1e-12)
    # exact expectation by Monte Carlo: the centred probit is closer than the raw one
    mc = LogitGaussianPrediction(mean, shifted, link="mc", n_samples=20000).proba()
    raw = probit_proba(mean, np.diagonal(shifted, axis1=1, axis2=2))
    assert np.abs(base - mc).mean() < 0.5 * np.abs(raw - mc).mean()
    var = centered_logit_var(cov)
    P = np.eye(C) - 1.0 / C
    np.testing.assert_allclose(var, np.diagonal(P @ cov @ P, axis1=1, axis2=2), rtol=1e-12)


def test_one_standard_error_rule_prefers_the_broader_posterior_among_near_ties():
    rng = np.random.RandomState(0)
    base = rng.exponential(size=200)
    # grid ascending in δ: index 1 is best by a hair, index 0 (broader) within noise and
    # within MAX_HELD_OUT_COST, index 2 clearly worse
    noise = 0.01 * rng.randn(200)
    noise -= noise.mean() - 0.2 * noise.std() / np.sqrt(200)  # worse by 0.2 standard errors
    losses = np.stack([base + noise, base, base + 0.2])
    assert one_standard_error_choice(losses) == 0
    # a clear winner stays
    losses = np.stack([base + 0.5, base, base + 0.1, base + 0.2])
    assert one_standard_error_choice(losses) == 1
    assert one_standard_error_choice(np.stack([base + 1, base + 2])) == 0
    # within one standard error but above MAX_HELD_OUT_COST: rejected
    wide = 0.5 * rng.randn(200)
    wide += MAX_HELD_OUT_COST * 1.5 - wide.mean()
    assert one_standard_error_choice(np.stack([base + wide, base])) == 1


def test_auto_holds_out_only_when_enough_rows():
    X, y = _clf_data(n=40)  # 8 held-out rows: too few to choose δ on
    assert LaplaceClassifier(**FAST).fit(X, y).hyperparameter_tuning_ == "evidence"
    X, y = _clf_data(n=60)
    assert LaplaceClassifier(**FAST).fit(X, y).hyperparameter_tuning_ == "cv"
    assert LaplaceClassifier(prior_structure="layerwise", **FAST).fit(
        X, y).hyperparameter_tuning_ == "evidence"
    assert LaplaceRegressor(**FAST).fit(X, y.astype(float)).hyperparameter_tuning_ == "online"
    assert LaplaceRegressor(subset_of_weights="last_layer", **FAST).fit(
        X, y.astype(float)).hyperparameter_tuning_ == "evidence"


def test_refit_with_other_tuning_drops_the_held_out_score():
    X, y = _clf_data(n=80)
    est = LaplaceClassifier(hyperparameter_tuning="cv", **FAST).fit(X, y)
    assert hasattr(est, "validation_nll_")
    est.set_params(hyperparameter_tuning="evidence").fit(X, y)
    assert not hasattr(est, "validation_nll_")


def test_cv_with_nn_predictive_scores_the_sampled_net():
    """pred_type="nn": δ by the held-out NLL of the sampled net (whole decades of the grid,
    the prediction's draws): equal to predicting with the net at each decade by hand.
    (It scored the GLM predictive before, and picked another δ on this net.)"""
    X, y = _clf_data(n=120)
    params = dict(pred_type="nn", n_samples=30, random_state=0)
    est = LaplaceClassifier(hyperparameter_tuning="cv", **params)
    fit, held = validation_split(len(y), est.validation_fraction, _cv_seed(est), labels=y)
    net = _trained_net(X[fit], y[fit])  # held-out rows the net never saw
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # cv with a frozen net
        est = est.set_params(net=net).fit(X, y)
    deltas = 10.0 ** LOG10_PRIOR_GRID[::4]
    losses = []
    for delta in deltas:
        part = LaplaceClassifier(net, hyperparameter_tuning=None, prior_precision=delta,
                                 **params).fit(X[fit], y[fit])
        proba = part.predict_proba(X[held])
        losses.append(-np.log(proba[np.arange(len(held)), y[held]]))
    chosen = one_standard_error_choice(losses)
    assert est.prior_precision_ == pytest.approx(deltas[chosen], rel=1e-12)
    assert est.validation_nll_ == pytest.approx(np.mean(losses[chosen]), rel=1e-9)
    assert np.ptp(np.mean(losses, axis=1)) > 0.01  # the decades differ


def test_cv_regressor_with_nn_predictive_scores_the_sampled_net():
    rng = np.random.RandomState(0)
    X = rng.randn(150, 3)
    y = np.sin(2 * X[:, 0]) + 0.2 * rng.randn(150)
    net = _trained_net(X, y, classifier=False)
    params = dict(pred_type="nn", n_samples=30, normalize_y=False, random_state=0)
    est = LaplaceRegressor(net, hyperparameter_tuning="cv", **params).fit(X, y)
    fit, held = validation_split(len(y), est.validation_fraction, _cv_seed(est))
    sigma = est.sigma_noise_ / est.laplace_.targets.std.mean()  # model units, as validation_nll_
    rho = est.prior_precision_ * sigma**2
    assert np.log10(rho) == pytest.approx(np.round(np.log10(rho)), abs=1e-9)  # a decade

    def held_out_nll(sigma):  # the sampled net's predictive at (ρ, σ), by hand
        part = LaplaceRegressor(net, hyperparameter_tuning=None, prior_precision=rho / sigma**2,
                                sigma_noise=sigma, **params).fit(X[fit], y[fit])
        mean, std = part.predict(X[held], return_std=True)
        return np.mean(0.5 * np.log(2 * np.pi * std**2) + 0.5 * ((y[held] - mean) / std) ** 2)

    scale = np.log(est.laplace_.targets.std.mean())  # validation_nll_ is in standardized units
    assert held_out_nll(sigma) == pytest.approx(est.validation_nll_ + scale, rel=1e-6)
    for factor in (0.9, 1.1):  # σ is the best at that ρ
        assert held_out_nll(factor * sigma) > held_out_nll(sigma)


def test_kron_variance_path_for_all_grid_values_at_once_equals_one_by_one():
    from sklaplace._laplace.holdout import variance_path

    X, y = _clf_data(n=80)
    est = LaplaceClassifier(hyperparameter_tuning=None, hessian_structure="kron",
                            subset_of_weights="all", **FAST).fit(X, y)
    with torch.no_grad():
        _, J = est.laplace_.subset.jacobians(torch.as_tensor(X[:30], dtype=torch.float64))
        path = variance_path(est.laplace_.evidence.posterior, J)
        deltas = 10.0 ** LOG10_PRIOR_GRID
        together = path.many(deltas, 0.7, chunk_bytes=1)  # one row at a time
        for d, cov in zip(deltas, together):
            torch.testing.assert_close(cov, path(d, 0.7), rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(path.many(deltas, 0.7), together, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("kind", ["binary", "multiclass", "regression"])
def test_factored_held_out_grid_equals_the_jacobian_grid(kind):
    """The per-layer factored variances of every δ (a Kronecker posterior over nn.Linear
    layers) equal those through the dense Jacobians, bias blocks and one-logit nets too."""
    from sklaplace._laplace.holdout import (factored_grid_variances, grid_variances,
                                            held_out_variances, variance_path)

    rng = np.random.RandomState(0)
    X = rng.normal(size=(60, 4))
    common = dict(hidden_layer_sizes=(5, 3), hessian_structure="kron",
                  hyperparameter_tuning=None, max_epochs=5, random_state=0)
    if kind == "regression":
        est = LaplaceRegressor(**common).fit(X, np.c_[X[:, 0], X[:, 1] ** 2])
    else:
        labels = (X[:, 0] > 0).astype(int) + (kind == "multiclass") * (X[:, 1] > 0.5)
        est = LaplaceClassifier(**common).fit(X, labels)
    fitted = est.laplace_
    posterior, Xv = fitted.evidence.posterior, torch.as_tensor(X[:17])
    deltas = 10.0 ** LOG10_PRIOR_GRID[::3]
    f, covs = held_out_variances(posterior, fitted.subset, Xv, deltas, 0.3)
    f_ref, J = fitted.subset.jacobians(Xv)
    reference = grid_variances(variance_path(posterior, J), deltas, 0.3, J)
    torch.testing.assert_close(f, f_ref, rtol=0, atol=0)
    for cov, ref in zip(covs, reference, strict=True):
        torch.testing.assert_close(cov, ref, rtol=1e-12, atol=1e-15)
    # one row per chunk: the same numbers
    _, factors = fitted.subset.jacobian_factors(Xv)
    chunked = factored_grid_variances(posterior, factors, deltas, 0.3, chunk_bytes=1)
    torch.testing.assert_close(chunked, torch.stack(covs), rtol=1e-13, atol=1e-16)


def test_the_rule_from_sums_of_parts_equals_the_rule_on_the_rows():
    from sklaplace._laplace.holdout import choice_from_sums, loss_sums

    rng = np.random.RandomState(0)
    for trial in range(200):
        n = rng.randint(2, 60)
        curve = (np.linspace(-1, 1, 9) - rng.uniform(-1, 1)) ** 2 * rng.choice([1e-3, 1e-2, 1])
        losses = curve[:, None] + rng.randn(9, n) * rng.choice([1e-3, 0.05])
        parts = [loss_sums(part) for part in np.array_split(losses, 3, axis=1)]
        total = [sum(p[i] for p in parts) for i in range(3)]
        assert choice_from_sums(*total) == one_standard_error_choice(losses), trial
