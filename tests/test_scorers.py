"""Scorers of probabilistic regression and of multilabel probabilities, by object in
GridSearchCV(scoring=...)."""

import functools

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.base import clone
from sklearn.datasets import make_multilabel_classification
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import BayesianRidge, LinearRegression, LogisticRegression
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score
from sklearn.multiclass import OneVsRestClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sklaplace import LaplaceClassifier, LaplaceRegressor
from sklaplace.metrics import (
    crps_gaussian,
    gaussian_nll,
    interval_coverage,
    neg_coverage_error_scorer,
    neg_crps_scorer,
    neg_gaussian_nll_scorer,
    neg_per_label_nll_scorer,
    per_label_nll,
)

RNG = np.random.RandomState(0)
X = RNG.uniform(-2, 2, size=(80, 2))
Y = X @ np.array([1.5, -0.5]) + np.sin(2 * X[:, 0]) + 0.3 * RNG.standard_normal(80)
COVERAGE_90 = functools.partial(neg_coverage_error_scorer, confidence=0.9)
SCORERS = {"nll": neg_gaussian_nll_scorer, "crps": neg_crps_scorer,
           "coverage": neg_coverage_error_scorer, "coverage_90": COVERAGE_90}


def _reference(name, mean, std, y):
    if name == "nll":
        return -gaussian_nll(y, mean, std)
    if name == "crps":
        return -crps_gaussian(y, mean, std)
    confidence = 0.9 if name == "coverage_90" else 0.95
    return -abs(interval_coverage(y, mean, std, confidence=confidence)[0] - confidence)


def test_grid_search_fold_scores_are_the_metrics_of_the_held_out_fold():
    cv = KFold(3, shuffle=True, random_state=0)
    grid = {"alpha_1": [1e-6, 10.0]}
    search = GridSearchCV(BayesianRidge(), grid, scoring=SCORERS, refit="nll", cv=cv)
    search.fit(X, Y)
    for i, params in enumerate(search.cv_results_["params"]):
        for fold, (train, test) in enumerate(cv.split(X)):
            model = clone(BayesianRidge()).set_params(**params).fit(X[train], Y[train])
            mean, std = model.predict(X[test], return_std=True)
            for name in SCORERS:
                assert_allclose(search.cv_results_[f"split{fold}_test_{name}"][i],
                                _reference(name, mean, std, Y[test]), rtol=1e-12)


def test_pipelines_ending_in_a_laplace_regressor():
    pipe = make_pipeline(StandardScaler(), LaplaceRegressor(
        hidden_layer_sizes=(6,), max_epochs=20, lr=0.03, random_state=0,
        hyperparameter_tuning=None))
    search = GridSearchCV(pipe, {"laplaceregressor__prior_precision": [0.1, 10.0]},
                          scoring=SCORERS, refit="crps", cv=2).fit(X, Y)
    for name in SCORERS:
        assert np.all(np.isfinite(search.cv_results_[f"mean_test_{name}"]))
    best = search.best_estimator_
    mean, std = best.predict(X, return_std=True)
    for name, scorer in SCORERS.items():
        assert_allclose(scorer(best, X, Y), _reference(name, mean, std, Y), rtol=1e-12)
    weight = np.arange(80) % 3
    assert_allclose(neg_gaussian_nll_scorer(best, X, Y, sample_weight=weight),
                    -gaussian_nll(Y, mean, std, sample_weight=weight), rtol=1e-12)


def test_a_regressor_without_std_is_refused():
    model = LinearRegression().fit(X, Y)
    for scorer in SCORERS.values():
        with pytest.raises(ValueError, match="LinearRegression has no predict"):
            scorer(model, X, Y)


# ---------------------------------------------------------------- multilabel: per-label NLL
XM, YM = make_multilabel_classification(n_samples=60, n_features=4, n_classes=3,
                                        random_state=0)


def _per_label_nll_by_hand(Y, P, weight=None):
    """Each cell's binary log loss, averaged over the labels of a row, then over rows."""
    n, n_labels = Y.shape
    weight = np.ones(n) if weight is None else np.asarray(weight, dtype=float)
    total = 0.0
    for i in range(n):
        row = 0.0
        for label in range(n_labels):
            p = P[i, label] if Y[i, label] == 1 else 1.0 - P[i, label]
            row -= np.log(p)
        total += weight[i] * row / n_labels
    return total / weight.sum()


def test_per_label_nll_is_the_mean_binary_log_loss_of_the_cells():
    Y = np.array([[1, 0, 1], [0, 0, 1]])
    P = np.array([[0.9, 0.2, 0.5], [0.3, 0.1, 0.6]])
    expected = -np.mean(np.log([0.9, 0.8, 0.5, 0.7, 0.9, 0.6]))
    assert per_label_nll(Y, P) == pytest.approx(expected, rel=1e-14)
    assert per_label_nll(Y, P) == pytest.approx(_per_label_nll_by_hand(Y, P), rel=1e-14)
    weight = [3.0, 1.0]
    assert per_label_nll(Y, P, sample_weight=weight) == pytest.approx(
        per_label_nll(np.repeat(Y, [3, 1], 0), np.repeat(P, [3, 1], 0)), rel=1e-14)
    # certain and wrong: clipped at machine epsilon, finite
    assert per_label_nll([[1, 0]], [[0.0, 1.0]]) == pytest.approx(-np.log(np.finfo(float).eps))
    with pytest.raises(ValueError, match="indicator matrix of shape"):
        per_label_nll([1, 0], [0.9, 0.2])
    with pytest.raises(ValueError, match="only 0 and 1"):
        per_label_nll([[2, 0]], [[0.9, 0.2]])
    with pytest.raises(ValueError, match="probabilities in"):
        per_label_nll([[1, 0]], [[1.2, 0.2]])
    with pytest.raises(ValueError, match="sample_weight must have shape"):
        per_label_nll(Y, P, sample_weight=[1.0])


def test_per_label_nll_scorer_in_a_grid_search_scores_the_held_out_fold():
    cv = KFold(3, shuffle=True, random_state=0)
    model = OneVsRestClassifier(LogisticRegression())
    grid = {"estimator__C": [0.01, 1.0]}
    search = GridSearchCV(model, grid, scoring=neg_per_label_nll_scorer, cv=cv).fit(XM, YM)
    for i, params in enumerate(search.cv_results_["params"]):
        for fold, (train, test) in enumerate(cv.split(XM)):
            fitted = clone(model).set_params(**params).fit(XM[train], YM[train])
            expected = -_per_label_nll_by_hand(YM[test], fitted.predict_proba(XM[test]))
            assert_allclose(search.cv_results_[f"split{fold}_test_score"][i], expected,
                            rtol=1e-12)


def test_per_label_nll_scorer_of_a_laplace_pipeline_and_of_per_label_lists():
    pipe = make_pipeline(StandardScaler(), LaplaceClassifier(
        hidden_layer_sizes=(6,), max_epochs=15, random_state=0, hyperparameter_tuning=None))
    scores = cross_val_score(pipe, XM, YM, cv=2, scoring=neg_per_label_nll_scorer)
    assert scores.shape == (2,) and np.all(np.isfinite(scores)) and np.all(scores < 0)
    pipe.fit(XM, YM)
    assert neg_per_label_nll_scorer(pipe, XM, YM) == pytest.approx(
        -_per_label_nll_by_hand(YM, pipe.predict_proba(XM)), rel=1e-12)
    # predict_proba as one (n, 2) array per label: the probability of 1 is taken
    forest = RandomForestClassifier(n_estimators=5, random_state=0).fit(XM, YM)
    columns = np.stack([p[:, 1] for p in forest.predict_proba(XM)], axis=1)
    assert neg_per_label_nll_scorer(forest, XM, YM) == pytest.approx(
        -per_label_nll(YM, columns), rel=1e-14)
