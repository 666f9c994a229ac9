"""Tests of sklaplace.distributions against formulas and independent Monte Carlo."""

import math

import numpy as np
import pytest
from scipy import stats
from scipy.special import expit, softmax

from sklaplace.distributions import (
    DirichletPrediction,
    centered_logit_var,
    mean_field_proba,
    LogitGaussianPrediction,
    NormalPrediction,
    binary_probit_proba,
    bridge_alpha,
    mc_proba,
    probit_proba,
)

MU3 = np.array([1.0, 0.0, -0.5])
COV_DIAG = np.diag([1.0, 2.0, 0.5])
COV_CORR = np.array([[2.0, 1.2, -0.5], [1.2, 1.5, 0.3], [-0.5, 0.3, 1.0]])
N_MC = 100_000


def _reference_mc(mu, cov, seed=12345):
    """Independent MC of E[softmax(f)], f ~ N(mu, cov) (numpy's multivariate_normal, SVD)."""
    f = np.random.default_rng(seed).multivariate_normal(mu, cov, size=N_MC)
    return softmax(f, axis=1).mean(axis=0)


def _softmax_list(t):
    e = [math.exp(x) for x in t]
    return [x / sum(e) for x in e]


# --------------------------------------------------------------------------- link formulas
def test_probit_proba_matches_formula():
    mu, var = [1.0, 0.0, -1.0], [0.0, 1.0, 4.0]
    expected = _softmax_list([m / math.sqrt(1 + math.pi / 8 * v) for m, v in zip(mu, var)])
    got = probit_proba(np.array([mu, [0.0, 0.0, 0.0]]), np.array([var, var]))
    np.testing.assert_allclose(got[0], expected, rtol=1e-12)
    np.testing.assert_allclose(got[1], [1 / 3] * 3, rtol=1e-12)
    # zero variance is the plain softmax
    np.testing.assert_allclose(probit_proba([mu], [[0.0] * 3]), [_softmax_list(mu)], rtol=1e-12)


def test_binary_probit_matches_formula():
    p = 1 / (1 + math.exp(-0.8 / math.sqrt(1 + 3 * math.pi / 8)))
    got = binary_probit_proba(np.array([0.8, -0.8]), np.array([3.0, 3.0]))
    np.testing.assert_allclose(got, [[1 - p, p], [p, 1 - p]], rtol=1e-12)
    # One variance for all logits broadcasts.
    np.testing.assert_allclose(binary_probit_proba(np.array([0.8, -0.8]), 3.0), got, rtol=1e-15)
    # Tiny probabilities keep their relative precision (no 1 - p cancellation).
    f = np.array([-700.0, -40.0, -1e-9, 0.0, 1e-9, 40.0, 700.0])
    got = binary_probit_proba(f, np.zeros_like(f))
    np.testing.assert_allclose(got, np.stack([expit(-f), expit(f)], axis=-1), rtol=1e-14, atol=0)


def test_bridge_alpha_matches_formula():
    mu, var = [1.0, 0.0, -1.0], [0.5, 1.0, 2.0]
    s = sum(math.exp(-m) for m in mu)
    expected = [(1 - 2 / 3 + math.exp(m) / 9 * s) / v for m, v in zip(mu, var)]
    np.testing.assert_allclose(bridge_alpha([mu], [var])[0], expected, rtol=1e-12)
    # K = 2: the 1 - 2/K term vanishes
    mu2, var2 = [0.3, -0.7], [0.4, 1.5]
    s2 = math.exp(-0.3) + math.exp(0.7)
    expected2 = [math.exp(m) / 4 * s2 / v for m, v in zip(mu2, var2)]
    np.testing.assert_allclose(bridge_alpha([mu2], [var2])[0], expected2, rtol=1e-12)


def test_bridge_shift_invariance_and_finite():
    rng = np.random.default_rng(0)
    mu, var = rng.normal(size=(5, 4)), rng.uniform(0.1, 2, size=(5, 4))
    alpha = bridge_alpha(mu, var)
    np.testing.assert_allclose(bridge_alpha(mu + 3.7, var), alpha, rtol=1e-10)
    np.testing.assert_allclose(bridge_alpha(mu + 1e3, var), alpha, rtol=1e-10)  # no overflow
    assert np.all(np.isfinite(bridge_alpha(mu, np.zeros_like(var))))


def test_dirichlet_mean_is_alpha_over_alpha0():
    alpha = np.array([[2.0, 3.0, 5.0], [0.5, 0.5, 1.0]])
    d = DirichletPrediction(alpha)
    np.testing.assert_allclose(d.precision, [10.0, 2.0])
    np.testing.assert_allclose(d.mean, alpha / alpha.sum(1, keepdims=True))


# --------------------------------------------------------------------------- against MC
def test_binary_probit_close_to_mc():
    # mu = 1.5, var = 2: the probit approximation is within 0.02 of E[sigmoid(f)]
    f = np.random.default_rng(1).normal(1.5, math.sqrt(2.0), size=N_MC)
    p = binary_probit_proba(np.array([1.5]), np.array([2.0]))[0, 1]
    assert abs(p - expit(f).mean()) < 0.02


@pytest.mark.parametrize(
    "cov, tol",
    # extended probit ignores correlations; observed errors are ~0.035 (diag) and ~0.055
    # (correlated) on these cases, so tolerances are set just above.
    [(COV_DIAG, 0.05), (COV_CORR, 0.07)],
    ids=["diag", "correlated"],
)
def test_extended_probit_close_to_mc(cov, tol):
    got = probit_proba(MU3[None], np.diag(cov)[None])[0]
    np.testing.assert_allclose(got, _reference_mc(MU3, cov), atol=tol)


@pytest.mark.parametrize(
    "cov", [COV_DIAG, COV_CORR, np.ones((3, 3))], ids=["diag", "corr", "rank1"]
)
def test_mc_proba_matches_independent_mc(cov):
    z = np.random.default_rng(7).standard_normal((N_MC, 3))
    got = mc_proba(MU3[None], cov[None], z)[0]
    np.testing.assert_allclose(got, _reference_mc(MU3, cov), atol=0.01)
    assert got.sum() == pytest.approx(1.0)


def test_mc_proba_common_random_numbers():
    rng = np.random.default_rng(3)
    mu = rng.normal(size=(6, 3))
    a = rng.normal(size=(6, 3, 3))
    cov = a @ np.swapaxes(a, 1, 2)
    z = rng.standard_normal((50, 3))
    full = mc_proba(mu, cov, z)
    subset = [4, 1]
    np.testing.assert_allclose(mc_proba(mu[subset], cov[subset], z), full[subset], rtol=1e-12)
    pred = LogitGaussianPrediction(mu, cov, link="mc", n_samples=50, seed=5)
    sub = LogitGaussianPrediction(mu[subset], cov[subset], link="mc", n_samples=50, seed=5)
    np.testing.assert_allclose(sub.proba(), pred.proba()[subset], rtol=1e-12)
    np.testing.assert_allclose(sub.mutual_information(), pred.mutual_information()[subset])


# --------------------------------------------------------------------------- single logit
def _single_logit_pred(f, v, **kw):
    f, v = np.asarray(f, float), np.asarray(v, float)
    mean = np.stack([-f / 2, f / 2], axis=1)
    cov = (v / 4)[:, None, None] * np.array([[1.0, -1.0], [-1.0, 1.0]])
    return LogitGaussianPrediction(mean, cov, single_logit=True, **kw)


def test_single_logit_probit_and_mc():
    f, v = np.array([1.5, -0.4, 3.0]), np.array([2.0, 0.5, 5.0])
    p = [expit(fi / math.sqrt(1 + math.pi * vi / 8)) for fi, vi in zip(f, v)]
    got = _single_logit_pred(f, v).proba()
    np.testing.assert_allclose(got[:, 1], p, rtol=1e-12)
    np.testing.assert_allclose(got.sum(1), 1.0)
    # MC on the rank-one 2-logit Gaussian sees exactly sigmoid(f), f ~ N(f, v)
    mc = _single_logit_pred(f, v, link="mc", n_samples=N_MC).proba()
    f_draws = np.random.default_rng(2).normal(f, np.sqrt(v), size=(N_MC, 3))
    np.testing.assert_allclose(mc[:, 1], expit(f_draws).mean(0), atol=0.01)
    np.testing.assert_allclose(mc[:, 1], p, atol=0.02)  # probit accuracy, as above


# --------------------------------------------------------------------- LogitGaussianPrediction
def test_logit_gaussian_links_and_shapes():
    mu = np.stack([MU3, MU3[::-1]])
    cov = np.stack([COV_DIAG, COV_CORR])
    pred = LogitGaussianPrediction(mu, cov)
    np.testing.assert_allclose(pred.logit_var, [[1.0, 2.0, 0.5], [2.0, 1.5, 1.0]])
    np.testing.assert_allclose(pred.proba(), mean_field_proba(mu, pred.logit_cov))
    bridge = LogitGaussianPrediction(mu, cov, link="bridge")
    np.testing.assert_allclose(bridge.proba(), bridge.dirichlet().mean)
    np.testing.assert_allclose(bridge.dirichlet().alpha, bridge_alpha(mu, pred.logit_var))
    mc = LogitGaussianPrediction(mu, cov, link="mc", n_samples=200, seed=9)
    z = np.random.default_rng(9).standard_normal((200, 3))
    np.testing.assert_allclose(mc.proba(), mc_proba(mu, cov, z), rtol=1e-12)
    for p in (pred.proba(), bridge.proba(), mc.proba()):
        assert p.shape == (2, 3) and p.dtype == np.float64
        np.testing.assert_allclose(p.sum(1), 1.0)


def test_nn_link_uses_logit_samples():
    samples = np.random.default_rng(0).normal(size=(30, 4, 3))
    mu, cov = samples.mean(0), np.stack([np.cov(samples[:, i].T) for i in range(4)])
    pred = LogitGaussianPrediction(mu, cov, link="nn", logit_samples=samples)
    np.testing.assert_allclose(pred.proba(), softmax(samples, axis=-1).mean(0))
    ent = -(softmax(samples, -1) * np.log(softmax(samples, -1))).sum(-1).mean(0)
    expected = np.clip(stats.entropy(pred.proba(), axis=1) - ent, 0, None)
    np.testing.assert_allclose(pred.mutual_information(), expected, atol=1e-12)
    with pytest.raises(ValueError, match="logit_samples"):
        LogitGaussianPrediction(mu, cov, link="nn")


def test_entropy_and_mutual_information():
    rng = np.random.default_rng(4)
    mu = rng.normal(size=(5, 3))
    a = rng.normal(size=(5, 3, 3))
    cov = a @ np.swapaxes(a, 1, 2)
    for link in ("probit", "bridge", "mc"):
        pred = LogitGaussianPrediction(mu, cov, link=link)
        ent, mi = pred.entropy(), pred.mutual_information()
        np.testing.assert_allclose(ent, stats.entropy(pred.proba(), axis=1), rtol=1e-12)
        assert ent.shape == mi.shape == (5,)
        assert np.all(mi >= 0) and np.all(ent >= mi)
    # MI grows with the logit covariance and vanishes with it
    mc = LogitGaussianPrediction(mu, cov, link="mc").mutual_information()
    assert np.all(mc > 0.01)
    tiny = LogitGaussianPrediction(mu, 1e-12 * cov, link="mc").mutual_information()
    np.testing.assert_allclose(tiny, 0.0, atol=1e-8)
    tiny_probit = LogitGaussianPrediction(mu, 1e-12 * cov).mutual_information()
    np.testing.assert_allclose(tiny_probit, 0.0, atol=1e-8)
    # entropy of a degenerate prediction is 0 (0 log 0 = 0)
    hard = LogitGaussianPrediction(np.array([[800.0, 0.0, 0.0]]), np.zeros((1, 3, 3)))
    np.testing.assert_allclose(hard.entropy(), 0.0, atol=1e-12)


def test_logit_gaussian_sample_moments():
    mu = np.stack([MU3, -MU3])
    cov = np.stack([COV_CORR, np.ones((3, 3))])  # second one singular
    pred = LogitGaussianPrediction(mu, cov)
    s = pred.sample(20_000, random_state=0)
    assert s.shape == (20_000, 2, 3)
    np.testing.assert_allclose(s.mean(0), mu, atol=0.05)
    for i in range(2):
        np.testing.assert_allclose(np.cov(s[:, i].T), cov[i], atol=0.08)
    np.testing.assert_array_equal(pred.sample(3, random_state=1), pred.sample(3, random_state=1))
    assert pred.sample().shape == (1, 2, 3)


def test_logit_gaussian_validation():
    with pytest.raises(ValueError, match="link"):
        LogitGaussianPrediction(np.zeros((1, 3)), np.zeros((1, 3, 3)), link="foo")
    with pytest.raises(ValueError, match="logit_cov"):
        LogitGaussianPrediction(np.zeros((1, 3)), np.zeros((1, 3)))
    with pytest.raises(ValueError, match="single_logit"):
        LogitGaussianPrediction(np.zeros((1, 3)), np.zeros((1, 3, 3)), single_logit=True)


# --------------------------------------------------------------------------- Dirichlet
def test_dirichlet_against_scipy():
    alpha = np.array([[2.0, 3.0, 5.0], [0.5, 0.7, 1.3], [40.0, 1.0, 9.0]])
    d = DirichletPrediction(alpha)
    for i, row in enumerate(alpha):
        ref = stats.dirichlet(row)
        assert d.entropy()[i] == pytest.approx(ref.entropy(), rel=1e-10)
        np.testing.assert_allclose(d.var[i], ref.var(), rtol=1e-12)
        np.testing.assert_allclose(d.mean[i], ref.mean(), rtol=1e-12)
    for k in range(3):
        np.testing.assert_allclose(d.marginal(k).mean(), d.mean[:, k], rtol=1e-12)
        np.testing.assert_allclose(d.marginal(k).var(), d.var[:, k], rtol=1e-12)


def test_dirichlet_sample():
    alpha = np.array([[2.0, 3.0, 5.0], [0.01, 0.02, 0.05]])  # tiny alphas must not give NaN
    d = DirichletPrediction(alpha)
    s = d.sample(20_000, random_state=0)
    assert s.shape == (20_000, 2, 3)
    assert np.all(np.isfinite(s)) and np.all(s >= 0)
    np.testing.assert_allclose(s.sum(-1), 1.0)
    np.testing.assert_allclose(s.mean(0), d.mean, atol=0.01)
    np.testing.assert_allclose(s.var(0), d.var, rtol=0.05, atol=1e-3)


def test_top_k_sets():
    d = DirichletPrediction(np.array([[100.0, 1.0, 1.0], [50.0, 49.0, 1.0]]))
    np.testing.assert_array_equal(d.top_k_sets(), [[1, 0, 0], [1, 1, 0]])
    perm = [2, 0, 1]
    permuted = DirichletPrediction(d.alpha[:, perm])
    np.testing.assert_array_equal(permuted.top_k_sets(0.95), [[0, 1, 0], [0, 1, 1]])
    # a flat Dirichlet keeps every class; lower confidence can only shrink the sets
    flat = DirichletPrediction(np.array([[5.0, 5.0, 5.0, 5.0]]))
    assert flat.top_k_sets().all()
    alpha = np.random.default_rng(0).gamma(1.0, 10.0, size=(50, 5))
    big = DirichletPrediction(alpha).top_k_sets(0.99)
    small = DirichletPrediction(alpha).top_k_sets(0.5)
    assert np.all(big >= small) and np.all(small.sum(1) >= 1)
    assert np.all(small[np.arange(50), alpha.argmax(1)])
    with pytest.raises(ValueError, match="confidence"):
        d.top_k_sets(1.5)


def test_top_k_sets_follows_algorithm():
    # explicit loop over Alg. 1 for one row as a reference
    alpha = np.array([[9.0, 1.0, 6.0, 3.0, 7.5]])
    t = 0.1
    a_sorted = np.sort(alpha[0])[::-1]
    a0 = a_sorted.sum()
    chosen = [0]
    for i in range(1, 5):
        lower = stats.beta(a_sorted[i - 1], a0 - a_sorted[i - 1]).ppf(t / 2)
        upper = stats.beta(a_sorted[i], a0 - a_sorted[i]).ppf(1 - t / 2)
        if upper <= lower:
            break
        chosen.append(i)
    expected = np.isin(alpha[0], a_sorted[chosen])
    np.testing.assert_array_equal(DirichletPrediction(alpha).top_k_sets(1 - t)[0], expected)


# --------------------------------------------------------------------------- Normal
def test_normal_prediction():
    mean, epi = np.array([0.0, 1.0, -2.0]), np.array([0.5, 1.0, 0.1])
    ale = np.array([0.5, 3.0, 0.2])
    pred = NormalPrediction(mean, epi, ale)
    np.testing.assert_allclose(pred.var, epi + ale)
    np.testing.assert_allclose(pred.std, np.sqrt(epi + ale))
    ref = stats.norm(mean, np.sqrt(epi + ale))
    y = np.array([0.3, -1.0, 2.0])
    np.testing.assert_allclose(pred.logpdf(y), ref.logpdf(y))
    np.testing.assert_allclose(pred.cdf(y), ref.cdf(y))
    np.testing.assert_allclose(pred.ppf(0.9), ref.ppf(0.9))
    np.testing.assert_allclose(pred.ppf([0.1, 0.5, 0.7]), ref.ppf([0.1, 0.5, 0.7]))
    np.testing.assert_allclose(pred.to_scipy().cdf(y), ref.cdf(y))
    lo, hi = pred.interval(0.95)
    np.testing.assert_allclose((lo, hi), ref.interval(0.95))
    draws = ref.rvs(size=(20_000, 3), random_state=0)
    coverage = ((draws >= lo) & (draws <= hi)).mean(0)
    np.testing.assert_allclose(coverage, 0.95, atol=0.01)
    s = pred.sample(5, random_state=0)
    assert s.shape == (5, 3)
    np.testing.assert_array_equal(s, pred.sample(5, random_state=0))
    big = pred.sample(20_000, random_state=1)
    np.testing.assert_allclose(big.mean(0), mean, atol=0.05)
    np.testing.assert_allclose(big.std(0), pred.std, rtol=0.03)
    for bad in (0, 1, 1.2, -0.1):
        with pytest.raises(ValueError, match="confidence"):
            pred.interval(bad)


def test_normal_prediction_multi_output():
    mean = np.zeros((4, 2))
    pred = NormalPrediction(mean, np.ones((4, 2)), 3.0 * np.ones((4, 2)))
    np.testing.assert_allclose(pred.std, 2.0)
    assert pred.sample(3, random_state=0).shape == (3, 4, 2)
    lo, hi = pred.interval(0.5)
    np.testing.assert_allclose(hi, 2.0 * stats.norm.ppf(0.75))
    assert lo.shape == (4, 2)


def test_bridge_far_from_the_data_is_finite_and_keeps_the_order():
    """Logit means hundreds apart (a linear net far from the data) overflowed α to inf and
    the bridge's probabilities to NaN, and argmax then picked the first NaN's class."""
    from sklaplace.distributions import bridge_alpha

    mu = np.array([[0.0, 720.0, 5.0], [300.0, -500.0, 0.0], [0.0, 1.0, 2.0]])
    var = np.array([[1.0, 1.0, 1.0], [0.5, 2.0, 1.0], [1.0, 0.3, 2.0]])
    alpha = bridge_alpha(mu, var)
    dirichlet = DirichletPrediction(alpha)
    assert np.isfinite(alpha).all() and (alpha > 0).all()
    for values in (dirichlet.mean, dirichlet.var, dirichlet.entropy()):
        assert np.isfinite(values).all()
    np.testing.assert_allclose(dirichlet.mean.sum(1), 1.0)
    np.testing.assert_array_equal(dirichlet.mean[:2].argmax(1), [1, 0])
    # where nothing overflows, Eq. 7 as written
    K, m = 3, mu[2] - mu[2].mean()
    eq7 = (1 - 2 / K + np.exp(m) / K**2 * np.exp(-m).sum()) / var[2]
    np.testing.assert_allclose(alpha[2], eq7, rtol=1e-13)


def test_mutual_information_of_each_link():
    """MI was H[proba under link] − E_MC[H]: with the probit or the bridge the link's error
    swamped the difference (binary f = −2, v = 0.2: 0.0019 with the probit, 0 with the
    bridge; the truth by quadrature is 0.0107). The probit's now comes from the draws, the
    bridge's from its Dirichlet in closed form (the draws' MI exceeded the entropy of the
    bridge's mean)."""
    from scipy.special import expit

    f, v = -2.0, 0.2
    mean = np.array([[-f / 2, f / 2]])
    cov = np.array([[[v / 4, -v / 4], [-v / 4, v / 4]]])
    x, w = np.polynomial.hermite_e.hermegauss(200)
    p = expit(f + np.sqrt(v) * x)
    w = w / w.sum()
    entropy = stats.entropy([w @ p, 1 - w @ p])
    truth = entropy - w @ (-(p * np.log(p) + (1 - p) * np.log(1 - p)))
    mis = [LogitGaussianPrediction(mean, cov, link=link, n_samples=20000, single_logit=True)
           .mutual_information() for link in ("probit", "bridge", "mc")]
    np.testing.assert_array_equal(mis[0], mis[2])
    assert mis[2][0] == pytest.approx(truth, rel=0.05)
    assert mis[1][0] == pytest.approx(truth, rel=0.1)


def test_bridge_mutual_information_never_exceeds_its_entropy():
    rng = np.random.default_rng(0)
    for n_classes in (2, 3, 5):
        mu = 3 * rng.normal(size=(50, n_classes))
        a = rng.normal(size=(50, n_classes, n_classes))
        pred = LogitGaussianPrediction(mu, a @ np.swapaxes(a, 1, 2), link="bridge")
        mi, entropy = pred.mutual_information(), pred.entropy()
        assert np.all(mi >= 0) and np.all(mi <= entropy + 1e-12)


@pytest.mark.parametrize("make", [
    lambda: NormalPrediction(np.zeros(3), np.array([1.0, -0.5, 1.0]), 0.1),
    lambda: NormalPrediction(np.zeros(3), np.ones(3), np.array([np.nan, 1.0, 1.0])),
    lambda: DirichletPrediction(np.array([[1.0, 0.0, 2.0]])),
])
def test_invalid_variances_and_concentrations_are_refused(make):
    # a negative variance gave NaN std, logpdf and samples without a word
    with pytest.raises(ValueError, match="must be finite"):
        make()


def test_normal_prediction_refuses_values_that_would_grow_its_shape():
    # a (n, 1) column against (n,) means gave an (n, n) array of log densities
    dist = NormalPrediction(np.zeros(5), np.ones(5), np.ones(5))
    y = np.arange(5.0)
    for method in (dist.logpdf, dist.cdf):
        with pytest.raises(ValueError, match=r"y of shape \(5, 1\) does not broadcast"):
            method(y[:, None])
        assert method(y).shape == (5,) and np.shape(method(0.5)) == (5,)
    with pytest.raises(ValueError, match="q of shape"):
        dist.ppf(np.full((5, 1), 0.5))
    wide = NormalPrediction(np.zeros((5, 2)), np.ones((5, 2)), np.ones((5, 2)))
    assert wide.logpdf(np.array([0.0, 1.0])).shape == (5, 2)
