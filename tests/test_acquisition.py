"""``sklaplace.acquisition``: each function against many-draw Monte Carlo of the posterior
it speaks of (seeded; tolerances of a few Monte Carlo standard errors)."""

import numpy as np
import pytest
from scipy.special import entr, softmax
from scipy.stats import norm
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sklaplace import LaplaceClassifier, LaplaceRegressor
from sklaplace.acquisition import (bald, expected_improvement, mutual_information,
                                   predictive_entropy, thompson_sample, upper_confidence_bound)

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

S = 20000
ROWS = np.array([[0.3, -1.5], [-2.7, 0.4], [1.1, 2.9], [0.0, 0.0]])


@pytest.fixture(scope="module")
def reg():
    rng = np.random.RandomState(0)
    X = rng.uniform(-2, 2, size=(80, 2))
    y = 10 * np.sin(X[:, 0]) + X[:, 1] ** 2 + 3 + 0.5 * rng.normal(size=80)
    return LaplaceRegressor(hidden_layer_sizes=(8,), max_epochs=20, random_state=0).fit(X, y)


@pytest.fixture(scope="module")
def clf():
    rng = np.random.RandomState(0)
    X = rng.normal(size=(90, 2))
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.5)
    return LaplaceClassifier(hidden_layer_sizes=(8,), max_epochs=20, random_state=0).fit(X, y)


def _within(value, draws, k=4.0):
    """|value − mean(draws)| ≤ k Monte Carlo standard errors, per row."""
    se = draws.std(0) / np.sqrt(len(draws))
    return np.all(np.abs(value - draws.mean(0)) <= k * se + 1e-4)  # rare events: se 0


# ---------------------------------------------------------------- Bayesian optimisation
@pytest.mark.parametrize("minimize", [True, False])
@pytest.mark.parametrize("xi", [0.0, 0.5])
def test_expected_improvement_against_function_draws(reg, minimize, xi):
    best = float(np.median(reg.predict(ROWS)))
    ei = expected_improvement(reg, ROWS, best, xi=xi, minimize=minimize)
    f = reg.sample_functions(ROWS, n_samples=S, random_state=0)[..., 0]
    gain = (best - xi - f) if minimize else (f - best - xi)
    draws = np.maximum(gain, 0.0)
    assert ei.shape == (4,) and np.all(ei >= 0) and ei.max() > 0.01
    assert _within(ei, draws)


def test_expected_improvement_with_noise_uses_observation_draws(reg):
    best = float(reg.predict(ROWS).min())
    ei = expected_improvement(reg, ROWS, best, noise=True)
    y = reg.sample_y(ROWS, n_samples=S, random_state=0)  # (rows, draws)
    assert _within(ei, np.maximum(best - y, 0.0).T)
    assert np.all(ei > expected_improvement(reg, ROWS, best))  # σ widens every row


def test_upper_confidence_bound_is_the_quantile_of_the_function(reg):
    kappa = 1.0
    low = upper_confidence_bound(reg, ROWS, kappa)
    high = upper_confidence_bound(reg, ROWS, kappa, minimize=False)
    mean, std = reg.predict(ROWS), np.sqrt(reg.predict_dist(ROWS).epistemic_var)
    np.testing.assert_allclose(low, mean - kappa * std, rtol=1e-12)
    np.testing.assert_allclose(high, mean + kappa * std, rtol=1e-12)
    f = reg.sample_functions(ROWS, n_samples=S, random_state=1)[..., 0]
    below = (f < low).astype(float)  # a fraction Φ(−κ) of the functions lie below it
    p = norm.cdf(-kappa)
    assert np.all(np.abs(below.mean(0) - p) <= 4 * np.sqrt(p * (1 - p) / S))
    noisy = upper_confidence_bound(reg, ROWS, kappa, noise=True)
    np.testing.assert_allclose(noisy, mean - kappa * reg.predict(ROWS, return_std=True)[1])


def test_thompson_sample_is_one_joint_draw(reg):
    np.testing.assert_array_equal(thompson_sample(reg, ROWS, random_state=5),
                                  reg.sample_functions(ROWS, 1, 5)[0, :, 0])
    X = np.vstack([ROWS[:2], ROWS[:1] + 0.05])  # two nearby rows: strongly correlated
    draws = np.stack([thompson_sample(reg, X, random_state=k) for k in range(1000)])
    assert draws.shape == (1000, 3)
    mean, cov = reg.predict(X, return_cov=True)
    cov = cov - reg.sigma_noise_ ** 2 * np.eye(3)  # the function's covariance (no noise)
    assert _within(mean, draws)
    np.testing.assert_allclose(np.cov(draws.T), cov, rtol=0.15, atol=0.15 * cov.diagonal().max())
    corr = np.corrcoef(draws.T)
    reference = cov / np.sqrt(np.outer(cov.diagonal(), cov.diagonal()))
    np.testing.assert_allclose(corr, reference, atol=0.1)
    assert reference[0, 2] > 0.9


def test_through_a_pipeline(reg):
    rng = np.random.RandomState(0)
    X = rng.uniform(-2, 2, size=(60, 2))
    pipe = make_pipeline(StandardScaler(), LaplaceRegressor(
        hidden_layer_sizes=(8,), max_epochs=20, random_state=0)).fit(X, X[:, 0] ** 2)
    Xt = pipe[0].transform(ROWS)
    np.testing.assert_array_equal(expected_improvement(pipe, ROWS, 0.5),
                                  expected_improvement(pipe[-1], Xt, 0.5))
    np.testing.assert_array_equal(thompson_sample(pipe, ROWS, 0), thompson_sample(pipe[-1], Xt, 0))


def test_arguments_are_checked(reg, clf):
    with pytest.raises(ValueError, match="kappa"):
        upper_confidence_bound(reg, ROWS, kappa=-1)
    with pytest.raises(ValueError, match="best"):
        expected_improvement(reg, ROWS, best=np.nan)
    with pytest.raises(ValueError, match="xi"):
        expected_improvement(reg, ROWS, 0.0, xi="a")
    with pytest.raises(ValueError, match="regressor"):
        expected_improvement(clf, ROWS, 0.0)
    with pytest.raises(ValueError, match="LaplaceRegressor"):
        thompson_sample(clf, ROWS)
    with pytest.raises(ValueError, match="sample_proba"):
        mutual_information(reg, ROWS)


# ---------------------------------------------------------------- active learning
def _reference_draws(clf, X, seed=7):
    """Class probabilities of logits drawn per row from predict_dist's Gaussian (S, n, C)."""
    dist, rng = clf.predict_dist(X), np.random.RandomState(seed)
    return np.stack([softmax(rng.multivariate_normal(m, c, size=S), axis=-1)
                     for m, c in zip(dist.logit_mean, dist.logit_cov)], axis=1)


def _entropy_se(draws):
    """Delta-method standard error of the entropy of the draws' mean, per row."""
    p = draws.mean(0)
    g = -(np.log(np.maximum(p, 1e-300)) + 1)
    centered = draws - p
    return np.sqrt(np.einsum("snc,nc->sn", centered, g).var(0) / len(draws))


def test_predictive_entropy(clf):
    np.testing.assert_allclose(predictive_entropy(clf, ROWS),
                               entr(clf.predict_proba(ROWS)).sum(1), rtol=1e-12)
    # under the Monte Carlo link: the entropy of the posterior's mean probabilities
    mc = clf.set_params(link_approx="mc", n_samples=S)
    try:
        value = predictive_entropy(mc, ROWS)
        ref = _reference_draws(clf, ROWS)
        se = _entropy_se(ref)
        assert np.all(np.abs(value - entr(ref.mean(0)).sum(1)) <= 4 * np.sqrt(2) * se + 1e-9)
    finally:
        clf.set_params(link_approx="probit", n_samples=100)


def test_mutual_information_against_independent_draws(clf):
    mi = mutual_information(clf, ROWS, n_samples=S, random_state=0)
    np.testing.assert_array_equal(bald(clf, ROWS, n_samples=S, random_state=0), mi)
    ref = _reference_draws(clf, ROWS)
    ref_mi = entr(ref.mean(0)).sum(1) - entr(ref).sum(2).mean(0)
    # its standard error: of E[H p] over the draws, and of H[E p] (delta method)
    se = np.sqrt(entr(ref).sum(2).var(0) / S + _entropy_se(ref) ** 2)
    assert np.all(np.abs(mi - ref_mi) <= 4 * np.sqrt(2) * se + 1e-9)
    assert np.all(mi >= 0) and np.all(mi <= predictive_entropy(clf, ROWS) + 0.05)
    assert mi.max() > 1e-3
    np.testing.assert_array_equal(mi, mutual_information(clf, ROWS, S, 0))  # seeded
