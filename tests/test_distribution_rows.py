"""The predictive distributions as frozen scipy distributions: scipy's methods on the same
parameters, row selection and len."""

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy import stats

from sklaplace.distributions import (
    DirichletPrediction,
    LogitGaussianPrediction,
    NormalPrediction,
)

RNG = np.random.default_rng(0)
MEAN = RNG.normal(size=(7, 2))
EPI = RNG.uniform(0.1, 1.0, size=(7, 2))
ALEA = RNG.uniform(0.1, 1.0, size=(7, 2))
Y = RNG.normal(size=(7, 2)) * 2.0
Q = RNG.uniform(0.01, 0.99, size=(7, 2))


@pytest.fixture(params=["single", "multi"])
def normal_and_scipy(request):
    if request.param == "single":
        mean, epi, alea, y, q = MEAN[:, 0], EPI[:, 0], ALEA[:, 0], Y[:, 0], Q[:, 0]
    else:
        mean, epi, alea, y, q = MEAN, EPI, ALEA, Y, Q
    dist = NormalPrediction(mean, epi, alea)
    return dist, stats.norm(loc=mean, scale=np.sqrt(epi + alea)), y, q


@pytest.mark.parametrize("method", ["pdf", "logpdf", "cdf", "logcdf", "sf", "logsf"])
def test_density_and_tail_methods_are_scipys(normal_and_scipy, method):
    dist, ref, y, _ = normal_and_scipy
    assert_allclose(getattr(dist, method)(y), getattr(ref, method)(y), rtol=1e-13)


@pytest.mark.parametrize("method", ["ppf", "isf"])
def test_quantile_methods_are_scipys(normal_and_scipy, method):
    dist, ref, _, q = normal_and_scipy
    assert_allclose(getattr(dist, method)(q), getattr(ref, method)(q), rtol=1e-13)
    assert_allclose(getattr(dist, method)(0.3), getattr(ref, method)(0.3), rtol=1e-13)


def test_summaries_are_scipys(normal_and_scipy):
    dist, ref, _, _ = normal_and_scipy
    assert_allclose(dist.median(), ref.median(), rtol=1e-13)
    assert_allclose(dist.entropy(), ref.entropy(), rtol=1e-13)
    for order in (1, 2, 3, 4):
        assert_allclose(dist.moment(order), ref.moment(order), rtol=1e-12)
    for ours, theirs in zip(dist.interval(0.8), ref.interval(0.8)):
        assert_allclose(ours, theirs, rtol=1e-13)
    for ours, theirs in zip(dist.support(), ref.support()):
        assert_array_equal(ours, theirs)
    # scipy's methods mean(), std(), var() are the arrays of the same name
    assert_allclose(dist.mean, ref.mean(), rtol=1e-13)
    assert_allclose(dist.std, ref.std(), rtol=1e-13)
    assert_allclose(dist.var, ref.var(), rtol=1e-13)


def test_rvs_are_scipys_draws(normal_and_scipy):
    dist, ref, _, _ = normal_and_scipy
    assert_array_equal(dist.rvs(random_state=3), ref.rvs(random_state=3))
    size = (4, *dist.mean.shape)
    assert_array_equal(dist.rvs(size=size, random_state=np.random.default_rng(1)),
                       ref.rvs(size=size, random_state=np.random.default_rng(1)))


def test_expect_of_one_value_and_refusal_for_many():
    dist = NormalPrediction(MEAN[:, 0], EPI[:, 0], ALEA[:, 0])
    one = dist[2]
    ref = stats.norm(MEAN[2, 0], np.sqrt(EPI[2, 0] + ALEA[2, 0]))
    assert_allclose(one.expect(lambda x: x**2), ref.expect(lambda x: x**2), rtol=1e-10)
    with pytest.raises(ValueError, match="one predictive at a time"):
        dist.expect(lambda x: x)


def test_scipy_methods_refuse_arguments_that_would_grow_the_shape():
    dist = NormalPrediction(MEAN[:, 0], EPI[:, 0], ALEA[:, 0])
    for method in ("pdf", "logcdf", "sf", "logsf", "isf"):
        with pytest.raises(ValueError, match="does not broadcast"):
            getattr(dist, method)(np.zeros((7, 1)))


ROW_KEYS = [slice(2, 5), slice(None, None, -2), np.array([True, False] * 3 + [True]),
            np.array([6, 0, 0]), [1, 3], -1, 4, np.int64(2), []]


@pytest.mark.parametrize("key", ROW_KEYS, ids=lambda k: repr(k))
def test_normal_rows_keep_the_split(key):
    dist = NormalPrediction(MEAN, EPI, ALEA)
    rows = np.arange(7)[key] if not isinstance(key, (int, np.integer)) else [key]
    part = dist[key]
    assert type(part) is NormalPrediction and len(part) == len(rows)
    assert_array_equal(part.mean, MEAN[rows])
    assert_array_equal(part.epistemic_var, EPI[rows])
    assert_array_equal(part.aleatoric_var, ALEA[rows])
    assert_array_equal(part.cdf(Y[rows]), dist.cdf(Y)[rows])


@pytest.mark.parametrize("key", ROW_KEYS, ids=lambda k: repr(k))
def test_classification_rows(key):
    rows = np.arange(7)[key] if not isinstance(key, (int, np.integer)) else [key]
    alpha = RNG.uniform(0.5, 3.0, size=(7, 3))
    dirichlet = DirichletPrediction(alpha)
    assert len(dirichlet) == 7 and type(dirichlet[key]) is DirichletPrediction
    assert_array_equal(dirichlet[key].alpha, alpha[rows])

    mean = RNG.normal(size=(7, 3))
    root = RNG.normal(size=(7, 3, 3))
    cov = root @ np.swapaxes(root, 1, 2)
    samples = RNG.normal(size=(5, 7, 3))
    for link in ("probit", "bridge", "mc", "nn"):
        dist = LogitGaussianPrediction(mean, cov, link=link, n_samples=50, seed=4,
                                       logit_samples=samples if link == "nn" else None)
        part = dist[key]
        assert type(part) is LogitGaussianPrediction and len(part) == len(rows)
        assert (part.link, part.n_samples, part.seed) == (link, 50, 4)
        assert_array_equal(part.logit_cov, cov[rows])
        if len(rows):  # Monte Carlo draws are common to all rows: the rows' own values
            assert_allclose(part.proba(), dist.proba()[rows], rtol=1e-12)
            assert_allclose(part.mutual_information(), dist.mutual_information()[rows],
                            rtol=1e-10, atol=1e-15)
    assert_array_equal(dist[key].logit_samples, samples[:, rows])


def test_single_logit_rows_stay_single_logit():
    mean = np.column_stack([-np.arange(4.0), np.arange(4.0)]) / 2
    cov = np.tile(np.array([[1.0, -1.0], [-1.0, 1.0]]) / 4, (4, 1, 1))
    dist = LogitGaussianPrediction(mean, cov, single_logit=True)
    assert dist[1:].single_logit
    assert_allclose(dist[1:].proba(), dist.proba()[1:], rtol=1e-14)


def test_bad_row_keys_and_containers():
    dist = NormalPrediction(MEAN, EPI, ALEA)
    for key in [(slice(None), 0), np.ones((2, 2), dtype=int), np.array([0.5]), "a"]:
        with pytest.raises(IndexError, match="rows"):
            dist[key]
    for key in [7, -8, np.array([True, False])]:
        with pytest.raises(IndexError):
            dist[key]
    with pytest.raises(TypeError, match="not an array"):
        np.asarray(dist)
    with pytest.raises(TypeError, match="without rows"):
        len(NormalPrediction(0.0, 1.0, 1.0))
    assert bool(dist[[]]) and len(dist[[]]) == 0
    rows = list(NormalPrediction(MEAN[:3, 0], EPI[:3, 0], ALEA[:3, 0]))
    assert [row.mean.tolist() for row in rows] == [[m] for m in MEAN[:3, 0]]
