"""LaplaceOODDetector (scikit-learn's outlier API) and sklaplace.predict_dist."""

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.base import clone
from sklearn.datasets import make_blobs
from sklearn.exceptions import NotFittedError
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import sklaplace
from sklaplace import LaplaceClassifier, LaplaceRegressor
from sklaplace.metrics import ood_scores
from sklaplace.ood import LaplaceOODDetector

FAST = dict(hidden_layer_sizes=(8,), max_epochs=20, lr=0.03, random_state=0,
            hyperparameter_tuning="evidence")
N_TRAIN, N_FIT = 200, 400


@pytest.fixture(scope="module")
def blobs():
    X, y = make_blobs(n_samples=2600, centers=[[-2, 0], [2, 0], [0, 2.5]], random_state=0)
    clf = make_pipeline(StandardScaler(), LaplaceClassifier(**FAST))
    return X, clf.fit(X[:N_TRAIN], y[:N_TRAIN])


def _binomial_tolerance(rate, n_fit, n_test):
    # the threshold's own sampling error (n_fit rows) and that of the fresh rows: 3 sd
    return 3.0 * np.sqrt(rate * (1.0 - rate) * (1.0 / n_fit + 1.0 / n_test))


@pytest.mark.parametrize("score", ["auto", "max_proba"])
@pytest.mark.parametrize("target_fpr", [0.05, 0.2])
def test_false_positive_rate_and_a_shifted_set(blobs, score, target_fpr):
    X, clf = blobs
    fit_rows, fresh = X[N_TRAIN:N_TRAIN + N_FIT], X[N_TRAIN + N_FIT:]
    detector = LaplaceOODDetector(clf, score=score, target_fpr=target_fpr).fit(fit_rows)
    assert detector.score_ == ("mutual_information" if score == "auto" else score)
    k = int(np.floor(target_fpr * (N_FIT + 1)))
    assert np.sum(detector.predict(fit_rows) == -1) == k - 1  # the k-th smallest score
    expected_fpr = k / (N_FIT + 1)
    fpr = np.mean(detector.predict(fresh) == -1)
    assert abs(fpr - expected_fpr) <= _binomial_tolerance(target_fpr, N_FIT, len(fresh))
    if score == "auto":  # the confidence of a tanh net saturates far from the data
        for shift in ([0.0, -8.0], [10.0, 10.0]):  # below, and beside, all three blobs
            assert np.mean(detector.predict(fresh[:200] + shift) == -1) >= 0.9


def test_scores_and_decision_are_the_ood_scores(blobs):
    X, clf = blobs
    detector = LaplaceOODDetector(clf, score="entropy", target_fpr=0.1).fit(X[200:600])
    rows = X[600:650]
    assert_allclose(detector.score_samples(rows), -ood_scores(clf, rows, kind="entropy"))
    assert_allclose(detector.decision_function(rows),
                    detector.score_samples(rows) - detector.offset_)
    assert_array_equal(detector.predict(rows),
                       np.where(detector.decision_function(rows) < 0, -1, 1))
    assert_array_equal(detector.fit_predict(X[200:600]), detector.predict(X[200:600]))


def test_clone_keeps_the_fitted_estimator(blobs):
    X, clf = blobs
    detector = LaplaceOODDetector(clf, target_fpr=0.1).fit(X[200:600])
    copy = clone(detector)
    assert copy.estimator is clf and not hasattr(copy, "offset_")
    assert copy.fit(X[200:600]).offset_ == detector.offset_
    frozen = LaplaceOODDetector(FrozenEstimator(clf), target_fpr=0.1).fit(X[200:600])
    assert frozen.offset_ == detector.offset_


def test_regressor_auto_is_the_predictive_std():
    rng = np.random.RandomState(0)
    X = rng.uniform(-2, 2, size=(700, 1))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(700)
    reg = LaplaceRegressor(**FAST).fit(X[:200], y[:200])
    detector = LaplaceOODDetector(reg, target_fpr=0.1).fit(X[200:])
    assert detector.score_ == "std"
    assert_allclose(detector.score_samples(X[:5]), -reg.predict(X[:5], return_std=True)[1])
    assert np.mean(detector.predict(X[:100] + 10.0) == -1) >= 0.9


def test_refusals(blobs):
    X, clf = blobs
    with pytest.raises(ValueError, match="at least 19 in-distribution rows"):
        LaplaceOODDetector(clf, target_fpr=0.05).fit(X[:18])
    LaplaceOODDetector(clf, target_fpr=0.05).fit(X[:19])
    with pytest.raises(ValueError, match="target_fpr"):
        LaplaceOODDetector(clf, target_fpr=1.5).fit(X)
    with pytest.raises(ValueError, match="score"):
        LaplaceOODDetector(clf, score="energy").fit(X)
    with pytest.raises(NotFittedError):
        LaplaceOODDetector(LaplaceClassifier()).fit(X)
    with pytest.raises(NotFittedError):
        LaplaceOODDetector(clf).predict(X)
    with pytest.raises(ValueError, match="needs a regressor"):
        LaplaceOODDetector(clf, score="std").fit(X[:100])


def test_predict_dist_through_a_pipeline(blobs):
    X, clf = blobs
    dist = sklaplace.predict_dist(clf, X[:5])
    expected = clf[-1].predict_dist(clf[0].transform(X[:5]))
    assert_array_equal(dist.logit_mean, expected.logit_mean)
    assert_array_equal(dist.logit_cov, expected.logit_cov)
    assert_array_equal(sklaplace.predict_dist(FrozenEstimator(clf), X[:5]).proba(),
                       clf.predict_proba(X[:5]))
    assert_array_equal(sklaplace.predict_dist(clf[-1], X[:5]).proba(),
                       clf[-1].predict_proba(X[:5]))
    with pytest.raises(ValueError, match="LogisticRegression has no predict_dist"):
        sklaplace.predict_dist(make_pipeline(StandardScaler(), LogisticRegression()).fit(
            X[:50], np.arange(50) % 2), X[:5])
